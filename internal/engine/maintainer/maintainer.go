// Package maintainer is the per-changefeed brain. A node's Host runs the
// maintainer of every changefeed whose placement names the node: it
// places the changefeed's partitions on schedulable nodes and moves the
// changefeed's checkpoint to the minimum of its partitions' progress.
//
// A maintainer keeps nothing in memory that it cannot learn again: the
// routing table and the persisted positions are in etcd, and every node
// sends it a complete heartbeat of the changefeed's partitions it runs
// each interval, so a moved maintainer rebuilds the truth from the first
// round (its bootstrap). Its writes are fenced by its placement (the
// maintainer key's revision), so a maintainer that was moved away cannot
// write.
//
// It imports model, plan, engine/meta, engine/cluster, engine/transport,
// actor, checkpoint, eventlog and source (and its registry); never the
// dispatcher or coordinator.
package maintainer

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Host runs the maintainers placed on one node.
type Host struct {
	self  model.NodeID
	store *meta.Store
	view  *cluster.View
	tr    transport.Transport
	log   *slog.Logger

	sources map[model.ChangefeedID]openSource // for the DDL schedule and readers
	// logs serves the event logs of the readers running here; reads
	// reads any node's.
	logs    *eventlog.Server
	reads   *eventlog.Client
	pullers map[model.ChangefeedID]*pulling

	cfg HostConfig

	mu    sync.Mutex
	heard map[model.ChangefeedID]*heard
	// excluded are the captures kept out of a changefeed's placements
	// (exclude.go).
	excluded map[model.ChangefeedID]map[model.NodeID]*exclusion
	wake     chan struct{} // a final position arrived
	// passes: each changefeed's last pass; placed: its last placement
	// that found nothing to do (cadence.go).
	passes map[model.ChangefeedID]passMark
	placed map[model.ChangefeedID]placeMark
	// booting: changefeeds whose maintainer here has failed to start
	// since (bootstrap.go).
	booting map[model.ChangefeedID]*bootFailure
	// answering: recovery answers being sent (recover.go); Run waits for
	// them, and once it has ended (ended) none is sent.
	answering sync.WaitGroup
	ended     bool
	// maintained is how many changefeeds this node maintained at its
	// last pass (checkpointEvery).
	maintained atomic.Int64
}

// HostConfig is what a maintainer host is built from; nothing is set
// after.
type HostConfig struct {
	Self      model.NodeID
	Store     *meta.Store
	View      *cluster.View
	Transport transport.Transport
	// Logs serves the event logs of the readers this host runs (to the
	// node's dispatchers directly, to other nodes' through the
	// transport).
	Logs *eventlog.Server
	Log  *slog.Logger
	// MoveTimeout: a move or split whose source, alive, has not stopped
	// the partition at a final position within it is returned to Active
	// on the source (seed 003: failure before MigrateOut). Zero: 30 s.
	MoveTimeout time.Duration
	// MaxStartFailures: a partition its new node failed to start this
	// many times goes back where it came from (seed 003:
	// PreparePartition failed N times). Zero: 3.
	MaxStartFailures int
	// GiveUpAfter is how long a maintainer here may fail to start (open
	// its changefeed's source) before it says so in the changefeed's
	// status, for the coordinator to place it elsewhere (bootstrap.go).
	// Zero: 10 s.
	GiveUpAfter time.Duration
	// HandoverTimeout bounds how long a graceful stop of this node
	// keeps its maintainers for the final positions of partitions on
	// other stopping nodes (AwaitFinals). Zero: 10 s.
	HandoverTimeout time.Duration
	// Checkpoints, if set, is seed 003's CheckpointStore; a split cuts
	// the state saved there.
	Checkpoints checkpoint.Store
	// SinkHolds, if set, says where an exactly-once sink holds a
	// partition's durable writes, if later than from (fencing the
	// partition's writers; dispatcher.Manager.SinkHolds). A split whose
	// partition's node died starts both halves there: the upper half,
	// new, has no record of its own in the sink.
	SinkHolds func(ctx context.Context, e *meta.ChangefeedEntry, r model.RouteEntry, from model.Ts, copied model.CopyProgress) (model.Ts, model.CopyProgress)
	// LogDir, if set, is where the event logs of the readers running
	// here live (one directory per changefeed, emptied when a reader
	// starts): on disk, a large transaction costs disk, not memory. Empty
	// keeps them in memory (tests).
	LogDir string
	// LogMemory is the room the event logs here share for their newest
	// rows (nil: every row goes to the logs' files).
	LogMemory *eventlog.Memory
	// Checkpointed, if set, is told each checkpoint the host persists
	// with its changefeed's sink (the storage sink's metadata file). It
	// must not block.
	Checkpointed func(sinkURI string, ts model.Ts)
	// Faults, if set, injects failures (tests).
	Faults Faults
}

// Faults are the failures a test injects into a maintainer host.
type Faults interface {
	// BeforePlace is asked before a move's placement is written; an
	// error fails that write (seed 003's failed etcd save after
	// PreparePartition).
	BeforePlace(model.RouteEntry) error
	// BeforeBootstrap is asked before a maintainer here opens its
	// changefeed's source; an error fails the opening (seed 000's failed
	// maintainer bootstrap).
	BeforeBootstrap(model.ChangefeedID) error
}

// NewHost returns the maintainer host of a node.
func NewHost(cfg HostConfig) *Host {
	cfg.MoveTimeout = cmp.Or(cfg.MoveTimeout, 30*time.Second)
	cfg.MaxStartFailures = cmp.Or(cfg.MaxStartFailures, 3)
	cfg.GiveUpAfter = cmp.Or(cfg.GiveUpAfter, 10*time.Second)
	cfg.HandoverTimeout = cmp.Or(cfg.HandoverTimeout, 10*time.Second)
	view := cfg.View
	return &Host{self: cfg.Self, store: cfg.Store, view: view, tr: cfg.Transport, log: cfg.Log, cfg: cfg, sources: map[model.ChangefeedID]openSource{},
		logs: cfg.Logs, reads: eventlog.NewClient(cfg.Transport, func(cf model.ChangefeedID) (model.NodeID, bool) { return view.State().MaintainerNode(cf) }, cfg.Self, cfg.Logs),
		pullers: map[model.ChangefeedID]*pulling{}, heard: map[model.ChangefeedID]*heard{}, wake: make(chan struct{}, 1)}
}

// Run drives the node's maintainers until ctx ends.
func (h *Host) Run(ctx context.Context) error {
	defer func() {
		h.mu.Lock()
		h.ended = true
		h.mu.Unlock()
		h.answering.Wait()
	}()
	h.tr.Handle(transport.TopicHeartbeat, h.onHeartbeat)
	defer h.tr.Handle(transport.TopicHeartbeat, nil)
	h.logs.Register(h.tr)
	defer h.logs.Unregister(h.tr)
	t := time.NewTimer(passEvery)
	defer t.Stop()
	defer h.closeSources(nil)
	defer h.stopPullers()
	for ctx.Err() == nil {
		ch := h.view.Changed()
		st := h.view.State()
		began := time.Now()
		h.runPullers(ctx, st)
		h.pass(ctx, st)
		h.forget(st)
		h.closeSources(st)
		// Rest after a long pass, but a final position (a hand-over, a
		// split's pause running) ends the rest at once.
		rest := time.NewTimer(restFor(time.Since(began)))
		select {
		case <-rest.C:
		case <-h.wake:
			h.wakeAgain()
		case <-ctx.Done():
		}
		rest.Stop()
		t.Reset(min(passEvery, checkpointEvery(int(h.maintained.Load()))))
		select {
		case <-ch:
		case <-t.C:
		case <-h.wake:
		case <-ctx.Done():
		}
	}
	return nil
}

// passWorkers bounds how many changefeeds' maintainers one host runs at
// once. A pass is mostly waiting on etcd (a move's write, the progress
// record): one changefeed after another, a host with a hundred of them
// took seconds per pass while etcd and the CPU idled, and every step of a
// hand-over waits for a pass (a 20,000-partition drain moved 3
// partitions a second). In parallel, etcd batches the writes.
const passWorkers = 16

// pass runs one pass of every maintainer placed on this node.
func (h *Host) pass(ctx context.Context, st *meta.State) {
	var mine []*meta.ChangefeedEntry
	now := time.Now()
	maintained := 0
	for _, cf := range st.ChangefeedIDs() {
		if e := st.Changefeeds[cf]; e.Maintainer.Node == h.self && e.MaintainerRevision > 0 {
			maintained++
			if h.duePass(st, e, now) {
				mine = append(mine, e)
			}
		}
	}
	h.maintained.Store(int64(maintained))
	work := make(chan *meta.ChangefeedEntry)
	var wg sync.WaitGroup
	for range min(passWorkers, len(mine)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				err := h.maintain(ctx, st, e)
				h.bootstrapped(ctx, e, err)
				if err != nil && !errors.Is(err, meta.ErrStale) && ctx.Err() == nil {
					h.log.Warn("maintainer: will retry", "changefeed", e.Info.ID, "err", err)
				}
			}
		}()
	}
	for _, e := range mine {
		work <- e
	}
	close(work)
	wg.Wait()
}

// forget drops what was heard for changefeeds this node no longer
// maintains.
func (h *Host) forget(st *meta.State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cf, rep := range h.heard {
		if e := st.Changefeeds[cf]; e == nil || e.Maintainer.Node != h.self || e.Maintainer.Epoch != rep.epoch {
			delete(h.heard, cf)
		}
	}
	for cf := range h.passes {
		if e := st.Changefeeds[cf]; e == nil || e.Maintainer.Node != h.self {
			delete(h.passes, cf)
			delete(h.placed, cf)
			delete(h.booting, cf)
		}
	}
}

// restFor is how long the host rests after a pass (cluster.Rest's rule).
func restFor(took time.Duration) time.Duration {
	if took < 20*time.Millisecond {
		return 0
	}
	return min(took, cluster.MaxRest)
}

// wakeAgain re-arms the wake signal a rest consumed.
func (h *Host) wakeAgain() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// errSplit ends a maintainer's pass after a split: the split wrote the
// progress record itself (with both halves), and this pass's positions,
// read before it, would overwrite that with the routing table as it was.
var errSplit = errors.New("split: the next pass goes on")

// maintain is one pass of one changefeed's maintainer.
func (h *Host) maintain(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry) error {
	// Its start on this node: without its source a maintainer can do
	// nothing right (bootstrap.go).
	src, err := h.source(ctx, e)
	if err != nil {
		return err
	}
	mf := e.FenceOf(h.store.Keys())
	pos := h.positions(st, e)
	if wrote, err := h.recover(ctx, st, e, mf); err != nil || wrote {
		return err // after a write, the next pass reads again
	}
	// A paused or failed changefeed's partitions are placed too, though
	// none runs: a drain (a rollout) moves them off its capture, each
	// handed over at the exact position where its dispatcher stopped, and
	// a capture that died leaves them to the others. Before, a drain of a
	// capture holding one waited for them until it timed out (a failed
	// one's for ever), and a failed changefeed's move in flight never
	// ended, so its re-snapshot was refused while it lasted.
	if state := e.Status.State; state == model.ChangefeedNormal || state == model.ChangefeedPaused || state == model.ChangefeedFailed {
		if unsaved := heardBeyondSaved(st, e, pos); len(unsaved) > 0 {
			// Persisted before they are placed again; the next pass places.
			h.log.Debug("maintainer: persisting positions before placing their partitions again", "changefeed", e.Info.ID, "partitions", unsaved)
			h.wakeAgain()
			return h.advanceCheckpoint(ctx, st, e, mf, pos, unsaved...)
		}
		if !h.placedAlready(st, e) {
			if err := h.place(ctx, st, e, mf, pos); errors.Is(err, errSplit) {
				return nil
			} else if err != nil {
				return err
			}
		}
		// Every pass, not only those that place: a settled placement is
		// trusted for placeRecheck (10 s), and a DDL's barrier waited for
		// the next placing pass, holding its table up to that long
		// (a TRUNCATE under a PostgreSQL changefeed: 5 to 11 s).
		if state == model.ChangefeedNormal {
			if err := h.openBarriers(ctx, st, e, mf, pos, src); err != nil {
				return err
			}
		}
	}
	if wrote, err := h.reportIssues(ctx, e, mf); err != nil || wrote {
		return err
	}
	return h.advanceCheckpoint(ctx, st, e, mf, pos)
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
func (h *Host) place(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, pos model.ProgressTable) error {
	dest := h.destinations(st, e.Info.ID, time.Now())
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
	var toPlace, handed []meta.Placement
	for _, r := range routes {
		_, registered := st.Nodes[r.Route.Node]
		// A move's source is asked for its final position under its id,
		// whichever process holds it now (the dispatchers' manager hands
		// over what it does not run); any other placement is the
		// registered process's only if it was made for it.
		sourceAlive := registered && st.PlacedOnIncarnation(r)
		switch {
		case r.Route.Status == model.PartitionDraining:
			p, err := h.advanceMove(ctx, e, mf, r, pos, registered, dest)
			if err != nil {
				return err
			}
			if p != nil {
				handed = append(handed, *p)
			}
		case r.Route.Node != "" && sourceAlive && h.startFailures(e.Info.ID, r.Route) >= h.cfg.MaxStartFailures:
			if err := h.giveBack(ctx, st, e, mf, r, dest); err != nil {
				return err
			}
		case r.Route.Node == "" || !sourceAlive:
			node, ok := dest.Next()
			if !ok {
				continue // no schedulable node; placed when one appears
			}
			toPlace = append(toPlace, meta.Placement{Route: r, Node: node})
			switch {
			case r.Route.Node == "":
			case registered:
				h.log.Info("maintainer: partition's node restarted; placing it again from where it stopped", "changefeed", e.Info.ID, "partition", r.Route.ID, "from", r.Route.Node, "to", node)
			default:
				h.log.Info("maintainer: partition's node is gone; placing it again from its last checkpoint", "changefeed", e.Info.ID, "partition", r.Route.ID, "from", r.Route.Node, "to", node)
			}
		}
	}
	if len(handed) > 0 {
		if err := h.placeMoved(ctx, e, mf, handed); err != nil {
			return err
		}
		inFlight -= len(handed)
	}
	if len(toPlace) > 0 {
		// Placed together; balancing waits for the next pass, which sees them.
		h.log.Debug("maintainer: placing partitions on the least-loaded captures", "changefeed", e.Info.ID, "partitions", len(toPlace),
			"loads_after", dest.String(), "excluded", h.excludedNodes(e.Info.ID, time.Now()))
		return h.store.PlacePartitions(ctx, mf, toPlace)
	}
	moved, err := h.rebalance(ctx, st, e, mf, routes, dest, inFlight)
	if err == nil && !moved && inFlight == 0 && len(handed) == 0 {
		h.placeSettled(st, e)
	}
	return err
}
