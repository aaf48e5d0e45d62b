// Package cluster owns membership: a node joining under its session lease,
// and every node's watched, consistent view of the registered nodes, their
// persisted liveness and the current coordinator.
//
// It imports model and engine/meta; it must never import election,
// coordinator, api or cli.
package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// View is a node's picture of the cluster, kept current by one etcd watch.
// All readers see states that etcd actually had, in revision order.
type View struct {
	store *meta.Store
	log   *slog.Logger
	// space is spacing; a test holds every burst to a fixed spacing.
	space func(copied int, cost time.Duration) time.Duration

	// featureHold is how long a feature stays off after a node without
	// it was last seen (AllNodesHave).
	featureHold time.Duration

	mu      sync.Mutex
	st      *meta.State
	changed chan struct{}
	loaded  chan struct{}
	lacking map[string]time.Time // by feature: when a node without it was last seen
}

// defaultFeatureHold outlasts a capture of an earlier version restarting
// in place (its registration gone with its lease, back when it rejoins),
// under systemd or a container's restart, and a few session TTLs.
const defaultFeatureHold = 2 * time.Minute

// NewView returns a view; Run fills it.
func NewView(store *meta.Store, log *slog.Logger) *View {
	return &View{store: store, log: log, space: spacing, featureHold: defaultFeatureHold, changed: make(chan struct{}), loaded: make(chan struct{}), lacking: map[string]time.Time{}}
}

// Run loads the state and follows every change until ctx ends. A watch that
// breaks (compaction, lost connection) is replaced by a fresh load, so the
// view never silently stops moving.
func (v *View) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := v.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		v.log.Warn("cluster view: watch ended, reloading", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func (v *View) follow(ctx context.Context) error {
	st, err := v.store.Load(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := v.store.Watch(wctx, st.Revision+1)
	// The state is published once the watch exists, so a view that says
	// it is loaded is following etcd: a read that asks etcd for the
	// watch's progress (the API's, after a write elsewhere) is answered.
	// Before, a read right after the first load could ask before the
	// watch was there, hear nothing, and fall back to a full read.
	select {
	case created, ok := <-watch:
		if !ok {
			return errors.New("watch channel closed before it was created")
		}
		if err := created.Err(); err != nil {
			return err
		}
		if !created.Created {
			st = st.Clone()
			st.Apply(v.store.Keys(), created)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	v.publish(st)
	published := time.Now()
	for resp := range watch {
		if err := resp.Err(); err != nil {
			return err // compacted or broken: Run reloads
		}
		began := time.Now()
		st = st.Clone()
		st.Apply(v.store.Keys(), resp)
		// The responses that come meanwhile go into the same copy: a
		// state is cloned per change it publishes, and a changefeed's
		// routing table and positions are copied whole when they change
		// (at 100,000 partitions each placement transaction changes 100
		// of them). Taking only the responses already queued was not
		// enough: under load the watch hands them over one by one, and a
		// capture spent a third of its CPU copying tables, its view 15 s
		// or more behind etcd while a large changefeed started. So after
		// a change that copied many entries, the next state is published
		// no sooner than spacing(copied, cost) after the last one, and
		// what arrives until then goes into this copy. A change that copies
		// little (small changefeeds, however many) is published at once,
		// as is the first change after a quiet spell. What is published
		// is still a state etcd had: the one after the last response.
		due := published.Add(v.space(st.Copied(), time.Since(began)))
		for n := 1; n < maxCoalesced; n++ {
			next, ok, arrived := receiveBy(watch, due)
			if !arrived {
				break
			}
			if !ok {
				v.publish(st)
				return errors.New("watch channel closed")
			}
			if err := next.Err(); err != nil {
				v.publish(st)
				return err
			}
			st.Apply(v.store.Keys(), next)
		}
		v.publish(st)
		published = time.Now()
	}
	return errors.New("watch channel closed")
}

// receiveBy returns the next watch response that arrives by due, or one
// already queued once due has passed; arrived is false when none did.
func receiveBy(watch clientv3.WatchChan, due time.Time) (resp clientv3.WatchResponse, ok, arrived bool) {
	wait := time.Until(due)
	if wait <= 0 {
		select {
		case resp, ok = <-watch:
			return resp, ok, true
		default:
			return resp, false, false
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case resp, ok = <-watch:
		return resp, ok, true
	case <-t.C:
		return resp, false, false
	}
}

// maxCoalesced bounds the watch responses applied to one copy of the
// state before it is published.
const maxCoalesced = 256

// spacing is how long after the last published state the next one waits,
// given how many entries its change copied and how long the copy and the
// change took: from 10,000 entries up (below, states are published at
// once: a cluster of many small changefeeds is not slowed, however loaded
// the machine), twenty times what the copy took or 2 µs per entry,
// whichever is longer, and never more than 250 ms. The time counts: on a
// saturated machine a copy takes longer, and publishing less often is what
// frees the CPU (at 100,000 partitions, 2 µs an entry alone left the
// checkpoint lag at 15-28 s where the time-based spacing had 1.5-4.5 s).
func spacing(copied int, cost time.Duration) time.Duration {
	if copied < 10_000 {
		return 0
	}
	return min(max(time.Duration(copied)*2*time.Microsecond, 20*cost), 250*time.Millisecond)
}

func (v *View) publish(st *meta.State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.st = st
	now := time.Now()
	for _, f := range model.BuildFeatures {
		for _, n := range st.Nodes {
			if !n.Info.Has(f) {
				v.lacking[f] = now
				break
			}
		}
	}
	close(v.changed)
	v.changed = make(chan struct{})
	select {
	case <-v.loaded:
	default:
		close(v.loaded)
	}
}

// Loaded is closed once the first state is in.
func (v *View) Loaded() <-chan struct{} { return v.loaded }

// Changed returns a channel closed at the next change. Take it before
// reading the state, then wait on it: no change is missed.
func (v *View) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

// State returns the current state; callers must not modify it (each change
// publishes a new one, so holding it is safe).
func (v *View) State() *meta.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.st == nil {
		return &meta.State{Nodes: map[model.NodeID]meta.NodeEntry{}, Liveness: map[model.NodeID]meta.LivenessEntry{}}
	}
	return v.st
}

// AllNodesHave says whether every node registered now has feature f
// (model.NodeInfo.Features), and has had it for featureHold: a node of an
// earlier version that restarts in place leaves the cluster for moments,
// and the feature stays off meanwhile. False before the view has loaded,
// when it knows no node, this one included.
func (v *View) AllNodesHave(f string) bool {
	st := v.State()
	for _, n := range st.Nodes {
		if !n.Info.Has(f) {
			return false
		}
	}
	v.mu.Lock()
	last, seen := v.lacking[f]
	v.mu.Unlock()
	return len(st.Nodes) > 0 && (!seen || time.Since(last) >= v.featureHold)
}

// Liveness returns a registered node's liveness.
func (v *View) Liveness(id model.NodeID) (model.Liveness, bool) {
	st := v.State()
	if _, ok := st.Nodes[id]; !ok {
		return 0, false
	}
	return st.LivenessOf(id), true
}

// SchedulableNodes returns the registered nodes that may receive new work:
// Alive only.
func (v *View) SchedulableNodes() []model.NodeID { return v.State().SchedulableNodeIDs() }

// CoordinatorCandidates returns the registered nodes that may campaign:
// Alive only. The only-node-left exception first makes that node Alive.
func (v *View) CoordinatorCandidates() []model.NodeID {
	return v.State().NodesWhere(model.Liveness.MayCampaign)
}

// OnlyNodeLeft reports whether id is the one registered node.
func (v *View) OnlyNodeLeft(id model.NodeID) bool {
	st := v.State()
	_, ok := st.Nodes[id]
	return ok && len(st.Nodes) == 1
}

// Leader returns the current coordinator as the election keys say.
func (v *View) Leader() (meta.Leader, bool) { return v.State().Leader() }

// WaitFor blocks until cond holds for the view's state or ctx ends.
func (v *View) WaitFor(ctx context.Context, cond func(*meta.State) bool) error {
	for {
		ch := v.Changed()
		select {
		case <-v.loaded:
			if cond(v.State()) {
				return nil
			}
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitRevision blocks until the view has seen etcd at rev or later.
func (v *View) WaitRevision(ctx context.Context, rev int64) error {
	return v.WaitFor(ctx, func(st *meta.State) bool { return st.Revision >= rev })
}

// MaxRest bounds Rest.
const MaxRest = 250 * time.Millisecond

// Rest is what a loop that follows the view does after a pass that took
// took: it waits as long again (at most MaxRest) before the next. A view
// changes with every write in the cluster, and each pass reads the whole
// state; with tens of thousands of partitions a pass costs milliseconds
// and the writes come hundreds a second, so passes run back to back and
// starve the node. Resting as long as the pass took keeps a loop to half
// of a core at most. Passes under 20ms do not rest: at small scale a pass
// takes microseconds (or a few milliseconds of etcd writes), and resting
// there only delays the next hand-over (it tripled a split's median pause).
func Rest(ctx context.Context, took time.Duration) {
	if took < 20*time.Millisecond {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(min(took, MaxRest)):
	}
}

// Fixed returns a view that holds st until Set replaces it: for tests
// of what reads the view, without etcd.
func Fixed(st *meta.State) *View {
	v := NewView(nil, nil)
	v.publish(st)
	return v
}

// Set publishes st to a view made by Fixed.
func (v *View) Set(st *meta.State) { v.publish(st) }
