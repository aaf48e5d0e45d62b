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
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Host runs the maintainers placed on one node.
type Host struct {
	self  model.NodeID
	store *meta.Store
	view  *cluster.View
	log   *slog.Logger
}

// NewHost returns the maintainer host of a node.
func NewHost(self model.NodeID, store *meta.Store, view *cluster.View, log *slog.Logger) *Host {
	return &Host{self: self, store: store, view: view, log: log}
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
	}
	return h.advanceCheckpoint(ctx, st, e, mf)
}

// place gives every partition without a live node one: the schedulable
// node with the fewest partitions of this changefeed. A partition on a
// node that is still registered is left alone (moving work off a Draining
// node is the drain's business, done gracefully).
func (h *Host) place(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence) error {
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	routes := st.SortedPartitions(e.Info.ID)
	for _, r := range routes {
		dest.Count(r.Route.Node)
	}
	for _, r := range routes {
		if _, registered := st.Nodes[r.Route.Node]; registered && r.Route.Node != "" {
			continue
		}
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
