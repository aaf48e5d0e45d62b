// Package maintainer is the per-changefeed brain. A node's Host runs the
// maintainer of every changefeed whose placement names the node: it
// places the changefeed's partitions on schedulable nodes and moves the
// changefeed's checkpoint to the minimum of its partitions' progress.
//
// A maintainer keeps nothing in memory that matters: the routing table
// and the progress are in etcd, so a moved maintainer starts from the
// truth. Its writes are fenced by its placement (the maintainer key's
// revision), so a maintainer that was moved away cannot write.
//
// It imports model, engine/meta and engine/cluster.
package maintainer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Host runs the maintainers placed on one node.
type Host struct {
	self  model.NodeID
	store *meta.Store
	view  *cluster.View
	log   *slog.Logger

	sources map[model.ChangefeedID]*gen.Generator // for the DDL schedule
}

// NewHost returns the maintainer host of a node.
func NewHost(self model.NodeID, store *meta.Store, view *cluster.View, log *slog.Logger) *Host {
	return &Host{self: self, store: store, view: view, log: log, sources: map[model.ChangefeedID]*gen.Generator{}}
}

// Run drives the node's maintainers until ctx ends.
func (h *Host) Run(ctx context.Context) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		ch := h.view.Changed()
		st := h.view.State()
		for _, cf := range st.ChangefeedIDs() {
			e := st.Changefeeds[cf]
			if e.Maintainer.Node == h.self && e.MaintainerRevision > 0 {
				if err := h.maintain(ctx, st, e); err != nil && !errors.Is(err, meta.ErrStale) && ctx.Err() == nil {
					h.log.Warn("maintainer: will retry", "changefeed", cf, "err", err)
				}
			}
		}
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// maintain is one pass of one changefeed's maintainer.
func (h *Host) maintain(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry) error {
	mf := e.FenceOf(h.store.Keys())
	if e.Status.State == model.ChangefeedNormal {
		if err := h.place(ctx, st, e, mf); err != nil {
			return err
		}
		if err := h.openBarriers(ctx, st, e, mf); err != nil {
			return err
		}
	}
	return h.advanceCheckpoint(ctx, st, e, mf)
}

// MaxMovesInFlight bounds the graceful moves one changefeed makes at once.
const MaxMovesInFlight = 4

// place keeps the routing table healthy, in this order:
//
//  1. moves in progress: a partition whose source reported its final
//     position goes Active on its target (next epoch); a move whose target
//     can no longer take it gets another target; a move whose source died
//     is placed directly (from the last checkpoint);
//  2. partitions without a live node are placed (at-least-once);
//  3. partitions on Draining nodes are moved off gracefully, then the
//     most-loaded nodes give partitions to the least-loaded, at most
//     MaxMovesInFlight at a time.
func (h *Host) place(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence) error {
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	routes := st.SortedPartitions(e.Info.ID)
	inFlight := 0
	for _, r := range routes {
		if r.Route.Status == model.PartitionDraining {
			dest.Count(r.Route.Target)
			inFlight++
		} else {
			dest.Count(r.Route.Node)
		}
	}
	for _, r := range routes {
		_, sourceAlive := st.Nodes[r.Route.Node]
		switch {
		case r.Route.Status == model.PartitionDraining:
			if err := h.advanceMove(ctx, st, e, mf, r, sourceAlive, dest); err != nil {
				return err
			}
		case r.Route.Node == "" || !sourceAlive:
			node, ok := dest.Next()
			if !ok {
				return nil // no schedulable node; placed when one appears
			}
			if err := h.store.PlacePartition(ctx, mf, r, node); err != nil {
				return err
			}
			if r.Route.Node != "" {
				h.log.Info("maintainer: partition's node is gone; placed it again from its last checkpoint", "changefeed", e.Info.ID, "partition", r.Route.ID, "from", r.Route.Node, "to", node)
			}
		}
	}
	return h.rebalance(ctx, st, e, mf, routes, dest, inFlight)
}

func (h *Host) advanceMove(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, r meta.RouteRecord, sourceAlive bool, dest *plan.Destinations) error {
	target := r.Route.Target
	if !dest.IsCandidate(target) {
		next, ok := dest.Next()
		if !ok {
			return nil
		}
		h.log.Info("maintainer: move target can no longer take the partition; re-planned", "partition", r.Route.ID, "was", target, "now", next)
		return h.store.StartMove(ctx, mf, r, next)
	}
	p, reported := st.Progress[e.Info.ID][r.Route.ID]
	final := reported && p.Progress.Final && p.Progress.Epoch == r.Route.Epoch
	if !final && sourceAlive {
		return nil // the source is still draining it
	}
	if !final {
		h.log.Info("maintainer: source of a move died; the target resumes from the last checkpoint", "partition", r.Route.ID, "from", r.Route.Node, "to", target)
	}
	if err := h.store.PlacePartition(ctx, mf, r, target); err != nil {
		return err
	}
	h.log.Info("maintainer: partition moved", "changefeed", e.Info.ID, "partition", r.Route.ID, "from", r.Route.Node, "to", target, "epoch", r.Route.Epoch+1, "graceful", final)
	return nil
}

// rebalance starts graceful moves: first off nodes that may not keep work
// (Draining), then from the most- to the least-loaded node while they
// differ by more than one.
func (h *Host) rebalance(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, routes []meta.RouteRecord, dest *plan.Destinations, inFlight int) error {
	if inFlight >= MaxMovesInFlight {
		return nil
	}
	var movable []meta.RouteRecord
	perNode := map[model.NodeID][]meta.RouteRecord{}
	for _, r := range routes {
		if r.Route.Status != model.PartitionActive || r.Route.Node == "" {
			continue
		}
		if _, alive := st.Nodes[r.Route.Node]; !alive {
			continue
		}
		if st.LivenessOf(r.Route.Node) == model.LivenessDraining {
			movable = append(movable, r)
		} else if dest.IsCandidate(r.Route.Node) {
			perNode[r.Route.Node] = append(perNode[r.Route.Node], r)
		}
	}
	for len(movable) > 0 && inFlight < MaxMovesInFlight {
		target, ok := dest.Next()
		if !ok {
			return nil
		}
		if err := h.store.StartMove(ctx, mf, movable[0], target); err != nil {
			return err
		}
		h.log.Info("maintainer: moving a partition off a Draining node", "partition", movable[0].Route.ID, "from", movable[0].Route.Node, "to", target)
		movable, inFlight = movable[1:], inFlight+1
	}
	for inFlight < MaxMovesInFlight {
		from, fromLoad, to, toLoad := dest.Extremes()
		if from == "" || fromLoad-toLoad <= 1 || len(perNode[from]) == 0 {
			return nil
		}
		r := perNode[from][len(perNode[from])-1]
		perNode[from] = perNode[from][:len(perNode[from])-1]
		if err := h.store.StartMove(ctx, mf, r, to); err != nil {
			return err
		}
		dest.Move(from, to)
		inFlight++
		h.log.Info("maintainer: balancing", "partition", r.Route.ID, "from", from, "to", to)
	}
	return nil
}

func (h *Host) source(e *meta.ChangefeedEntry) (*gen.Generator, error) {
	if g, ok := h.sources[e.Info.ID]; ok && g.Config().StartMillis == e.Info.StartTs.Millis() {
		return g, nil
	}
	cfg, err := gen.ParseURI(e.Info.SourceURI)
	if err != nil {
		return nil, err
	}
	g, err := gen.New(cfg)
	if err != nil {
		return nil, err
	}
	h.sources[e.Info.ID] = g
	return g, nil
}

// openBarriers opens a table's DDL barrier once every partition of the
// table has made all rows before the table's next DDL durable (its
// checkpoint is just below the DDL). The first partition of the table
// writes the DDL; the others wait for it.
func (h *Host) openBarriers(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence) error {
	g, err := h.source(e)
	if err != nil {
		return err
	}
	byTable := map[string][]meta.RouteRecord{}
	var tables []string
	for _, r := range st.SortedPartitions(e.Info.ID) {
		if _, seen := byTable[r.Route.Span.Table]; !seen {
			tables = append(tables, r.Route.Span.Table)
		}
		byTable[r.Route.Span.Table] = append(byTable[r.Route.Span.Table], r)
	}
	for _, table := range tables {
		routes := byTable[table]
		low := model.Ts(0)
		for i, r := range routes {
			cp := e.Info.StartTs
			if p, ok := st.Progress[e.Info.ID][r.Route.ID]; ok && p.Progress.Checkpoint > cp {
				cp = p.Progress.Checkpoint
			}
			if i == 0 || cp < low {
				low = cp
			}
		}
		next := g.DDLs(table, low, model.TsFromTime(time.Now()).WithLogical(1))
		if len(next) == 0 || low < next[0].CommitTs-1 {
			continue // some partition has not reached the next DDL yet
		}
		ddl := next[0]
		rec, exists := st.Barriers[e.Info.ID][table]
		if exists && rec.Barrier.DDLTs >= ddl.CommitTs {
			continue
		}
		b := model.Barrier{Table: table, DDLTs: ddl.CommitTs, Writer: routes[0].Route.ID}
		if err := h.store.SetBarrier(ctx, mf, e.Info.ID, b, rec.Revision); err != nil {
			return err
		}
		h.log.Info("maintainer: every partition reached the DDL; barrier open", "changefeed", e.Info.ID, "table", table, "ddl_ts", ddl.CommitTs, "writer", b.Writer)
	}
	return nil
}

// advanceCheckpoint sets the changefeed's checkpoint to the minimum of
// its partitions' progress: everything up to it is durable everywhere.
func (h *Host) advanceCheckpoint(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence) error {
	routes := st.Partitions[e.Info.ID]
	if len(routes) == 0 {
		return nil
	}
	var cp model.Ts
	first := true
	for pid := range routes {
		p := e.Info.StartTs
		if rec, ok := st.Progress[e.Info.ID][pid]; ok && rec.Progress.Checkpoint > p {
			p = rec.Progress.Checkpoint
		}
		if first || p < cp {
			cp, first = p, false
		}
	}
	return h.store.SetCheckpoint(ctx, mf, e, cp)
}
