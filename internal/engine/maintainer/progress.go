package maintainer

import (
	"context"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// heard is what one changefeed's maintainer has heard in heartbeats since
// it was placed (the epoch of its placement).
type heard struct {
	epoch uint64
	parts map[string]*heardPart
	// failed: partitions their node reported it could not start.
	failed map[string]transport.FailedStart
	saved  time.Time // when the checkpoint was last written
	// positionsSaved is when every changed position was last written.
	positionsSaved time.Time
	// recover: accepted recovery requests, by partition (recover.go);
	// failure: a permanent error to fail the changefeed with; incidents
	// to record in its status; restarts already recorded.
	recover    map[string]acceptedRecovery
	failure    string
	failureRun uint64 // the changefeed's run the failure belongs to
	incidents  []model.Incident
	restarts   map[string]time.Time // by node@time, when it was heard
	// unseen: requests about an epoch the routing table does not have
	// yet, by identity, when first heard (recover.go).
	unseen map[string]time.Time
	// refusedLogged: when a refused position was last logged.
	refusedLogged time.Time
	// urgent: a heartbeat brought something the next pass must act on
	// at once (cadence.go).
	urgent bool
	// stall: failures that may keep the checkpoint from advancing
	// (recover.go).
	stall stall
	// beyond: partitions moved whose first position past their
	// hand-over was heard and is to be persisted at once.
	beyond []string
}

// heardPart is one partition's position as heard, and its routing
// entry's placement as last checked, with the routing table it was
// checked in (meta.State.RoutesID): a heartbeat's positions are checked
// against the table again only once it changed. At 100,000 partitions
// a node's heartbeats bring 33,000 positions twice a second, and looking
// each one up in the routing table (copying its entry, some 400 bytes)
// and again among those heard, and storing it back, was a quarter of
// the maintainer's capture's CPU.
type heardPart struct {
	model.Progress
	routes unsafe.Pointer // the routing table the placement below is of
	epoch  uint64         // the routing entry's Epoch, Node and Start then
	node   model.NodeID
	start  model.Ts
}

// MaxAhead is how far beyond this node's clock a reported position may
// be: the clocks of the captures may disagree by this much, no more. A
// database's positions come from its own clock, which may be further
// ahead: a position its reader here has produced (its event log's
// resolved one) is never refused.
const MaxAhead = 10 * time.Second

// onHeartbeat records a node's heartbeat for a changefeed this node
// maintains. Reports for another maintainer placement, or of a partition
// as placed under another epoch or on another node, are stale: dropped.
func (h *Host) onHeartbeat(_ context.Context, m transport.Message) {
	var hb transport.Heartbeat
	if err := m.Decode(&hb); err != nil {
		h.log.Warn("maintainer: dropped a heartbeat that does not decode", "from", m.From, "err", err)
		return
	}
	st := h.view.State()
	e := st.Changefeeds[hb.Changefeed]
	if e == nil || e.Maintainer.Node != h.self || e.Maintainer.Epoch != hb.MaintainerEpoch {
		return
	}
	positions, err := hb.Positions()
	if err != nil {
		h.log.Warn("maintainer: dropped a heartbeat whose positions do not decode", "from", m.From, "err", err)
		return
	}
	wake, copiedNow := false, false
	h.mu.Lock()
	rep := h.heard[hb.Changefeed]
	if rep == nil || rep.epoch != hb.MaintainerEpoch {
		rep = &heard{epoch: hb.MaintainerEpoch, parts: map[string]*heardPart{}, failed: map[string]transport.FailedStart{},
			recover: map[string]acceptedRecovery{}, restarts: map[string]time.Time{}, unseen: map[string]time.Time{}, stall: stall{advanced: time.Now()}}
		h.heard[hb.Changefeed] = rep
	}
	ahead := model.TsFromTime(time.Now().Add(MaxAhead))
	if l := h.logs.Get(hb.Changefeed); l != nil {
		// (A database whose clock runs ahead of this node's: every
		// position was refused, and the checkpoint never moved.)
		ahead = max(ahead, l.Resolved())
	}
	routes, routesID := st.Partitions[hb.Changefeed], st.RoutesID(hb.Changefeed)
	for _, pp := range positions {
		hp := rep.parts[pp.ID]
		var (
			epoch uint64
			node  model.NodeID
			start model.Ts
		)
		if hp != nil && hp.routes == routesID {
			epoch, node, start = hp.epoch, hp.node, hp.start
		} else if r, ok := routes[pp.ID]; ok {
			epoch, node, start = r.Route.Epoch, r.Route.Node, r.Route.Start
			if hp != nil {
				hp.routes, hp.epoch, hp.node, hp.start = routesID, epoch, node, start
			}
		} else {
			continue
		}
		if epoch != pp.Epoch || node != m.From {
			continue
		}
		if pp.Progress.Checkpoint > ahead {
			// No source has produced it yet: a forged or corrupt
			// report. Kept, it would be where the partition resumes
			// after a move, and everything before it would be skipped.
			if time.Since(rep.refusedLogged) > time.Minute {
				rep.refusedLogged = time.Now()
				h.log.Warn("maintainer: refused a position beyond the clock; no source could have produced it (a forged or corrupt heartbeat?)",
					"changefeed", hb.Changefeed, "partition", pp.ID, "from", m.From, "position", pp.Progress.Checkpoint, "ahead_by", pp.Progress.Checkpoint.Time().Sub(time.Now()).Round(time.Second))
			}
			continue
		}
		next := pp.Progress
		next.Node = m.From
		if len(rep.failed) > 0 {
			delete(rep.failed, pp.ID) // it runs
		}
		var cur model.Progress
		seen := hp != nil
		if seen {
			cur = hp.Progress
		}
		if seen && cur == next {
			// Nothing new (a quiet partition between its beats). A final
			// position is re-sent until it is persisted: each one wakes
			// the pass that persists it, as on its first arrival.
			wake = wake || next.Final
			continue
		}
		if seen && cur.Checkpoint > next.Checkpoint {
			// Everything up to the higher one is durable, whichever
			// placement wrote it: a restarted placement replays below it.
			// With its copy's progress there: the one of a lower position
			// may be a copy done where, later on, one began again (a
			// partition attached to the table), and kept with the higher
			// checkpoint it would skip that copy after a crash.
			next.Checkpoint, next.Copy = cur.Checkpoint, cur.Copy
		}
		// A final position, or a placement heard from for the first
		// time (a move is confirmed by it), is persisted at once.
		wake = wake || next.Final || !seen || cur.Epoch != next.Epoch
		if hs := start; hs != 0 && next.Checkpoint > hs && (!seen || cur.Epoch != next.Epoch || cur.Checkpoint <= hs) &&
			st.Progress[hb.Changefeed][pp.ID].Progress.Checkpoint <= hs {
			// A partition moved holds its changefeed's checkpoint at its
			// hand-over until a position past it is persisted: the
			// first one is, at once, not after the checkpoint's cadence
			// (up to a second; during a drain every changefeed has moves
			// in flight, and this was part of each one's pause). Once:
			// not again for a position heard before, nor, after the
			// maintainer moved, for one persisted before.
			rep.beyond = append(rep.beyond, pp.ID)
			wake = true
		}
		copiedNow = copiedNow || next.Copy.Done && !cur.Copy.Done
		if hp == nil {
			hp = &heardPart{routes: routesID, epoch: epoch, node: node, start: start}
			rep.parts[pp.ID] = hp
		}
		hp.Progress = next
	}
	if copiedNow && !wake && snapshotEnded(routes, rep.parts, st.Progress[hb.Changefeed]) {
		// The last copy of the initial snapshot: its end is persisted by
		// the next pass (whatToSave), run now rather than at the next
		// tick. Once per snapshot, however many partitions it has.
		wake = true
	}
	for _, f := range hb.Failed {
		if r, ok := st.Partitions[hb.Changefeed][f.ID]; ok && r.Route.Epoch == f.Epoch && r.Route.Node == m.From {
			rep.failed[f.ID] = f
			wake = true
		}
	}
	replies := h.onRecover(st, e, rep, m.From, &hb)
	wake = wake || len(rep.recover) > 0 || rep.failure != "" || len(rep.incidents) > 0
	rep.urgent = rep.urgent || wake
	h.mu.Unlock()
	if len(replies) > 0 {
		h.sendAnswers(m.From, hb.Changefeed, hb.MaintainerEpoch, replies)
	}
	if wake {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// snapshotEnded says every partition of routes has copied its share of
// the initial snapshot, as heard or, where not heard yet, as persisted.
func snapshotEnded(routes map[string]meta.RouteRecord, heard map[string]*heardPart, saved map[string]meta.ProgressRecord) bool {
	for pid := range routes {
		p := saved[pid].Progress
		if hp := heard[pid]; hp != nil {
			p = hp.Progress
		}
		if !p.Copy.Done {
			return false
		}
	}
	return true
}

// positions merges, for every partition of the routing table, what the
// maintainer heard with what it persisted: the highest checkpoint, and the
// newest placement's word on whether it is final.
func (h *Host) positions(st *meta.State, e *meta.ChangefeedEntry) model.ProgressTable {
	h.mu.Lock()
	var parts map[string]*heardPart
	if rep := h.heard[e.Info.ID]; rep != nil && rep.epoch == e.Maintainer.Epoch {
		parts = rep.parts
	}
	out := make(model.ProgressTable, len(st.Partitions[e.Info.ID]))
	for pid, r := range st.Partitions[e.Info.ID] {
		p, hasP := st.Progress[e.Info.ID][pid]
		var got model.Progress
		hp, hasH := parts[pid]
		if hasH {
			got = hp.Progress
		}
		pos := p.Progress
		if hasH && (!hasP || got.Epoch >= pos.Epoch) {
			cp, copied := max(pos.Checkpoint, got.Checkpoint), got.Copy
			if hasP && pos.Epoch == got.Epoch && (pos.Checkpoint > got.Checkpoint || pos.Checkpoint == got.Checkpoint && pos.Copy.Beyond(copied)) {
				// Durable with the persisted checkpoint, which is kept.
				// By position first: a copy done begins again later on
				// (a partition attached to its table), and the progress
				// heard past the persisted checkpoint is the one there.
				copied = pos.Copy
			}
			pos, pos.Checkpoint, pos.Copy = got, cp, copied
		} else if hasH {
			pos.Checkpoint = max(pos.Checkpoint, got.Checkpoint)
		}
		if st := r.Route.Start; st != 0 && (st > pos.Checkpoint || st == pos.Checkpoint && r.Route.StartCopy.Beyond(pos.Copy)) {
			// The hand-over's position, with its copy progress.
			pos.Checkpoint, pos.Copy = st, r.Route.StartCopy
		}
		pos.Checkpoint = max(pos.Checkpoint, e.Info.StartTs, r.Route.Since)
		if pos.Epoch != r.Route.Epoch {
			// Final and Handover speak of a placement that is over.
			pos.Final, pos.Handover = false, false
		}
		out[pid] = pos
	}
	h.mu.Unlock()
	return out
}

// heardBeyondSaved returns the partitions about to be placed again (their
// node gone, or restarted as a new process) whose position heard from
// that node is beyond the one persisted. The next placement resumes from
// the persisted one, and the old node forgets its final position once the
// partition is placed again: placed first, what it wrote between the two
// would be written twice (a capture restarted under load, while its
// final position was in flight).
//
// A move whose source is gone is one of them: its target starts from the
// persisted position too. Left out, the target wrote again from there
// while its reports were taken at the higher position heard, so a drain
// or split of it soon after handed over at that position what it had not
// written again yet (a key's older version landing last), and the event
// log was trimmed below where it read.
func heardBeyondSaved(st *meta.State, e *meta.ChangefeedEntry, pos model.ProgressTable) []string {
	var out []string
	for pid, r := range st.Partitions[e.Info.ID] {
		if r.Route.Node == "" {
			continue // never placed
		}
		if st.PlacedOnIncarnation(r) {
			// Its node runs it (false when the node is gone); a move's
			// source hands over its own position.
			continue
		}
		// Not the route's hand-over position (Start): the next placement
		// drops it, so it too must be in the progress record first (a
		// partition moved to a capture that stopped before starting it
		// was placed again from where its previous owner had started).
		saved := max(st.Progress[e.Info.ID][pid].Progress.Checkpoint, e.Info.StartTs, r.Route.Since)
		if p, ok := pos[pid]; ok && p.Checkpoint > saved {
			out = append(out, pid)
		}
	}
	sort.Strings(out)
	return out
}

// PersistInterval is how often a maintainer writes its changefeed's
// progress record and checkpoint while nothing final waits to be written.
const PersistInterval = time.Second

// positionsEvery is how often the positions that only moved forward are
// written: every PersistInterval up to 10,000 partitions, then one more
// second per 10,000 (a changefeed of 100,000 writes its 7 MB of
// positions every 10 s, not every second). The checkpoint is still
// written every PersistInterval; a partition restarted after a crash
// starts from its last written position (more duplicates, nothing lost),
// and a final position, a new placement's first one, is written at once.
func positionsEvery(partitions int) time.Duration {
	return PersistInterval * time.Duration(max(1, (partitions+9_999)/10_000))
}

// advanceCheckpoint sets the changefeed's checkpoint to the minimum of its
// partitions' positions (everything up to it is durable everywhere) and
// persists the positions, so that a partition whose node dies resumes from
// its own position, and a stopped dispatcher's final position survives.
// whatToSave compares the positions heard (pos) with those saved: the
// changefeed's checkpoint (the least position), whether anything changed,
// and the partitions whose positions are written now, however recently
// the record was (must among them).
func whatToSave(saved map[string]meta.ProgressRecord, pos model.ProgressTable, must []string) (cp model.Ts, changed bool, urgent []string) {
	first := true
	changed = len(pos) != len(saved)
	urgent = slices.Clone(must) // appended to below: not the caller's array
	// The copies done since the last write; urgent only if they end the
	// changefeed's snapshot (every partition copied): its end then shows
	// in the status at once, not after PersistInterval, while the copies
	// before it, which can be many a second, wait their turn.
	var copiedNow []string
	allCopied := true
	for pid, p := range pos {
		allCopied = allCopied && p.Copy.Done
		if first || p.Checkpoint < cp {
			cp, first = p.Checkpoint, false
		}
		old, ok := saved[pid]
		if !ok || old.Progress != p {
			changed = true
			// A final position waits for this write: the node that stopped
			// re-sends it until it sees it here, and a node that is leaving
			// waits for that. A new placement's first position confirms
			// its move.
			if (p.Final && (!old.Progress.Final || old.Progress.Handover != p.Handover)) ||
				(p.Node != "" && (old.Progress.Node != p.Node || old.Progress.Epoch != p.Epoch)) {
				urgent = append(urgent, pid)
			} else if p.Copy.Done && ok && !old.Progress.Copy.Done {
				copiedNow = append(copiedNow, pid)
			} else if ok && (p.Copy.Adds(old.Progress.Copy) || !p.Copy.Done && old.Progress.Copy.Done) {
				// A copy begun again (a partition attached to its table),
				// or a relation added to the one under way, is written
				// with the checkpoint that passes its beginning, not after
				// it: a partition placed again resumes from the
				// changefeed's checkpoint with its own saved copy's
				// progress (dispatcher's resumeFrom), and "done", or a
				// progress without the relation, there would skip it.
				urgent = append(urgent, pid)
			}
		}
	}
	if allCopied {
		urgent = append(urgent, copiedNow...)
	}
	return cp, changed, urgent
}

// takeBeyond returns, and forgets, the partitions of cf moved whose
// first position past their hand-over was heard since the last write.
func (h *Host) takeBeyond(cf model.ChangefeedID) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	rep := h.heard[cf]
	if rep == nil {
		return nil
	}
	out := rep.beyond
	rep.beyond = nil
	return out
}

// The positions of must, and of the partitions moved first heard past
// their hand-over, are written now, however recently the record was.
func (h *Host) advanceCheckpoint(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, pos model.ProgressTable, must ...string) error {
	if len(pos) == 0 {
		return nil
	}
	if beyond := h.takeBeyond(e.Info.ID); len(beyond) > 0 {
		must = append(slices.Clip(must), beyond...)
	}
	cp, changed, urgent := whatToSave(st.Progress[e.Info.ID], pos, must)
	if !changed && cp <= e.Status.CheckpointTs {
		return nil
	}
	h.mu.Lock()
	rep := h.heard[e.Info.ID]
	recent := rep != nil && time.Since(rep.saved) < persistGate(checkpointEvery(int(h.maintained.Load())))
	allDue := rep == nil || time.Since(rep.positionsSaved) >= positionsEvery(len(pos))
	h.mu.Unlock()
	if len(urgent) == 0 && (recent || !allDue && cp <= e.Status.CheckpointTs) {
		// Nothing due: the checkpoint written lately, or standing where
		// it is with the positions behind it not due yet.
		return nil
	}
	var only []string
	if !allDue {
		// Only the urgent positions' shards (none: the checkpoint alone).
		only = append(urgent, "")
	}
	resume := h.resumePoint(e.Info.ID, cp)
	if err := h.store.SaveProgress(ctx, mf, st, e, cp, resume, pos, only...); err != nil {
		return err
	}
	if cp > e.Status.CheckpointTs {
		h.persisted(e.Info.ID, cp, resume)
		if h.cfg.Checkpointed != nil {
			h.cfg.Checkpointed(e.Info.SinkURI, cp)
		}
	}
	h.mu.Lock()
	if rep := h.heard[e.Info.ID]; rep != nil {
		rep.saved = time.Now()
		if allDue {
			rep.positionsSaved = rep.saved
		}
		if cp > e.Status.CheckpointTs {
			rep.stall.advance(rep.saved) // SaveProgress cleared the error
		}
	}
	h.mu.Unlock()
	return nil
}

// startFailures is how many times the node of a placement reported it
// could not start it.
func (h *Host) startFailures(cf model.ChangefeedID, r model.RouteEntry) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rep := h.heard[cf]; rep != nil {
		if f, ok := rep.failed[r.ID]; ok && f.Epoch == r.Epoch {
			return f.Attempts
		}
	}
	return 0
}

func (h *Host) startError(cf model.ChangefeedID, pid string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rep := h.heard[cf]; rep != nil {
		return rep.failed[pid].Err
	}
	return ""
}
