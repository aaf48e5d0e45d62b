package maintainer

import (
	"time"
	"unsafe"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A maintainer's pass walks its changefeed's whole routing table. Passes
// run whenever the cluster's state changes and at least every passEvery
// (more often on a host of few changefeeds: checkpointEvery), and at
// 100,000 partitions each one cost a tenth of a second of CPU: most of
// the maintainer's capture went to passes that only found positions
// moved. So a large changefeed's pass runs at once only when something
// it must act on changed (its routing table, its entry, the nodes, or a
// heartbeat that brought a final position, a failed start, a recovery
// request or a failure); when only positions moved, it waits out
// passGap. The checkpoint is written at most every checkpointEvery
// anyway.

// passEvery is the most time between two passes of a host.
const passEvery = 500 * time.Millisecond

// checkpointEvery is how often a host of n changefeeds writes each one's
// checkpoint while it advances, and passes at least as often. The
// checkpoint as etcd holds it is what a changefeed's lag is measured
// against and what a consumer is told is complete, so the time between
// writes is part of the lag. Each write is an etcd transaction that every
// node's view decodes, so a host spends about checkpointWrites a second:
// one or two changefeeds are written every minPersist, four every 200 ms,
// twenty or more every PersistInterval, as before. The positions behind
// the checkpoint keep their own cadence (positionsEvery).
func checkpointEvery(n int) time.Duration {
	return min(PersistInterval, max(minPersist, time.Duration(n)*time.Second/checkpointWrites))
}

// checkpointWrites is about how many checkpoint writes a second a host
// makes while its changefeeds advance.
const checkpointWrites = 20

// minPersist is the least time between two checkpoint writes of one
// changefeed.
const minPersist = 100 * time.Millisecond

// persistGate is how long after a checkpoint write the next is held back
// when they are due every `every`: a quarter less, since the host's
// passes come every `every` too, and a pass a moment early would
// otherwise find the last write not quite old enough and leave the next
// to the pass after (writes every 200 ms where 100 were meant).
func persistGate(every time.Duration) time.Duration { return every - every/4 }

// passGap is the least time between two passes of a changefeed whose
// only news is moved positions (or its own checkpoint written): a
// little less than minPersist below 10,000 partitions (its host's timer
// brings a pass every minPersist, which this must not skip), 1 s at
// 100,000, at most 2 s. Below it, a host woken by every write of the
// cluster (each changefeed's checkpoint, ten a second) passed all its
// changefeeds each time.
func passGap(partitions int) time.Duration {
	if partitions < 10_000 {
		return persistGate(minPersist)
	}
	return min(2*time.Second, time.Duration(partitions)*10*time.Microsecond)
}

// passMark is what a changefeed's last pass saw.
type passMark struct {
	at      time.Time
	routes  unsafe.Pointer // meta.State.RoutesID
	entry   entryMark
	nodes   int64
	barrier unsafe.Pointer
}

// entryMark is what of a changefeed's entry a pass must act on at once
// when it changes: its definition, its maintainer's placement, its state
// and its run. Not its checkpoint, source position, error, incidents or
// table issues: its maintainer writes those itself.
type entryMark struct {
	info, maintainer int64 // revisions
	state            model.ChangefeedState
	run              uint64
}

func markOf(e *meta.ChangefeedEntry) entryMark {
	return entryMark{info: e.InfoRevision, maintainer: e.MaintainerRevision, state: e.Status.State, run: e.Status.Run}
}

// nodesMark changes whenever a node registers, leaves, or changes
// liveness, or the drain record changes (each write has a new revision).
func nodesMark(st *meta.State) int64 {
	var sum int64
	for _, n := range st.Nodes {
		sum += n.Revision
	}
	for _, l := range st.Liveness {
		sum += 3 * l.Revision
	}
	// The drain record too: its hold lifted (a drain's or a rollout's
	// plan resumed, its lag budget met) lets partitions move off the
	// Draining capture, and a settled placement waited for its recheck,
	// up to 10 s, before moving them (every budgeted drain began so).
	sum += 5 * st.DrainRevision
	return sum + int64(len(st.Nodes))<<40 + int64(len(st.Liveness))<<50
}

// duePass says whether changefeed e's maintainer should pass now, and
// if so records the pass.
func (h *Host) duePass(st *meta.State, e *meta.ChangefeedEntry, now time.Time) bool {
	cf := e.Info.ID
	mark := passMark{at: now, routes: st.RoutesID(cf), entry: markOf(e), nodes: nodesMark(st), barrier: st.BarriersID(cf)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passes == nil {
		h.passes = map[model.ChangefeedID]passMark{}
	}
	last, ok := h.passes[cf]
	urgent := false
	if rep := h.heard[cf]; rep != nil {
		urgent, rep.urgent = rep.urgent, false
	}
	if ok && !urgent && mark.routes == last.routes && mark.entry == last.entry && mark.nodes == last.nodes &&
		mark.barrier == last.barrier && now.Sub(last.at) < passGap(len(st.Partitions[cf])) {
		return false
	}
	h.passes[cf] = mark
	return true
}

// placeRecheck is how long a settled placement is trusted without a
// change: exclusions and move time-outs end with time alone.
const placeRecheck = 10 * time.Second

// placeMark is the state a changefeed's placement found nothing to do in.
type placeMark struct {
	at     time.Time
	routes unsafe.Pointer
	nodes  int64
}

// placeSettled records that place found nothing to do for e in st: no
// partition to place or to move, none being moved.
func (h *Host) placeSettled(st *meta.State, e *meta.ChangefeedEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.placed == nil {
		h.placed = map[model.ChangefeedID]placeMark{}
	}
	h.placed[e.Info.ID] = placeMark{at: time.Now(), routes: st.RoutesID(e.Info.ID), nodes: nodesMark(st)}
}

// placedAlready says whether place would find nothing to do again: the
// routing table and the nodes are as they were when it last did, no start
// failed since, no capture is excluded from e, and that was less than
// placeRecheck ago. (place walks every partition: at 100,000 it was a
// quarter of each pass.)
func (h *Host) placedAlready(st *meta.State, e *meta.ChangefeedEntry) bool {
	cf := e.Info.ID
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.placed[cf]
	if !ok || m.routes != st.RoutesID(cf) || m.nodes != nodesMark(st) || time.Since(m.at) >= placeRecheck || len(h.excluded[cf]) > 0 {
		return false
	}
	if rep := h.heard[cf]; rep != nil && len(rep.failed) > 0 {
		return false
	}
	return true
}
