package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// This file is the manager's side of a hand-over (seed 003's MigrateOut
// and PreparePartition): stopping dispatchers at an exact position,
// saving their state, and starting a partition only from the state its
// previous owner saved.

// ownFinal is the highest position where this node stopped the partition,
// under this placement or an earlier one, with the copy's progress there:
// it wrote exactly up to there (0 if it never stopped it). A move that was
// reverted, say, leaves one.
func (m *Manager) ownFinal(r model.RouteEntry) (model.Ts, model.CopyProgress) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var at model.Ts
	var copied model.CopyProgress
	for _, f := range m.finalsOf[key(r.Changefeed, r.ID)] {
		if f.p.Epoch <= r.Epoch && f.p.Checkpoint >= at {
			at, copied = f.p.Checkpoint, f.p.Copy
		}
	}
	return at, copied
}

// putFinalLocked records where a partition's dispatcher stopped, under
// its placement's key (finalKey). m.mu is held.
func (m *Manager) putFinalLocked(fk string, f *final) {
	m.dropFinalLocked(fk)
	m.finals[fk] = f
	pk := key(f.cf, f.pid)
	if m.finalsOf[pk] == nil {
		m.finalsOf[pk] = map[string]*final{}
	}
	m.finalsOf[pk][fk] = f
}

// dropFinalLocked forgets a final position. m.mu is held.
func (m *Manager) dropFinalLocked(fk string) {
	f, ok := m.finals[fk]
	if !ok {
		return
	}
	delete(m.finals, fk)
	pk := key(f.cf, f.pid)
	delete(m.finalsOf[pk], fk)
	if len(m.finalsOf[pk]) == 0 {
		delete(m.finalsOf, pk)
	}
}

// resumeFrom is where a partition starts when it is not handed over
// exactly: the highest durable position known, persisted or where it
// stopped here, and the copy's progress there.
func (m *Manager) resumeFrom(st *meta.State, r model.RouteEntry) (model.Ts, model.CopyProgress) {
	// A table that joined the changefeed later starts where it joined.
	from, copied := max(st.Changefeeds[r.Changefeed].Info.StartTs, r.Since), model.CopyProgress{}
	consider := func(at model.Ts, c model.CopyProgress) {
		if at > from || at == from && c.Beyond(copied) {
			from, copied = at, c
		}
	}
	p := st.Progress[r.Changefeed][r.ID].Progress
	consider(p.Checkpoint, p.Copy)
	// The changefeed's checkpoint is durable for every partition, and
	// its event log is trimmed there: a partition's own progress is
	// persisted less often (every second or more, with many partitions),
	// and one placed from it below the checkpoint (its node died in a
	// move, before its final position was heard) read below the trimmed
	// log for good, holding the changefeed's checkpoint and its log with
	// it. Its copy goes on from where it was persisted: at worst copied
	// again.
	consider(st.Changefeeds[r.Changefeed].Status.CheckpointTs, p.Copy)
	// A hand-over's position and copy progress come with the placement:
	// the persisted progress may not have caught up with them yet.
	if r.Start != 0 {
		consider(r.Start, r.StartCopy)
	}
	consider(m.ownFinal(r))
	return from, copied
}

// saveState is seed 003's MigrateOut: the partition's state, stopped at
// pos, goes to the CheckpointStore before the hand-over is reported. If
// it cannot be saved the hand-over is not reported (the move waits, and
// is reverted after the maintainer's move timeout).
func (m *Manager) saveState(r model.RouteEntry, pos model.Ts) bool {
	if m.cfg.Checkpoints == nil {
		return true
	}
	state, err := actor.NewReplication(r.Span, pos).Snapshot()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = m.cfg.Checkpoints.Save(ctx, r.Changefeed, r.ID, r.Epoch, state)
		cancel()
	}
	if err != nil {
		m.log.Warn("cannot save the partition's state; its hand-over waits", "partition", r.ID, "changefeed", r.Changefeed, "err", err)
		return false
	}
	return true
}

// prepare is seed 003's PreparePartition: a partition handed over
// gracefully starts only from the state its previous owner saved, for
// exactly the key range and position the routing table gives.
func (m *Manager) prepare(ctx context.Context, r model.RouteEntry) error {
	if m.cfg.Checkpoints == nil || r.Start == 0 {
		return nil // not a graceful hand-over: it resumes from its persisted position
	}
	a, err := checkpoint.LoadActor(ctx, m.cfg.Checkpoints, r.Changefeed, r.ID)
	if err != nil {
		return err
	}
	// The position may be below Start: the maintainer may have heard a
	// later durable position than the one its owner handed over at (a
	// restart of the owner). Start is durable; above it, nothing is.
	if !a.Span().SameRange(r.Span) || a.Position() > r.Start {
		return fmt.Errorf("the saved state of %s is %s at %s; the routing table gives %s at %s", r.ID, a.Span(), a.Position(), r.Span, r.Start)
	}
	return nil
}

// stopAndReport stops dispatchers in parallel (gracefully, unless the
// manager was aborted) and keeps where each ended as a final position.
func (m *Manager) stopAndReport(runs []*managed) {
	m.stopAndReportWithin(runs, 30*time.Second)
}

// stopAndReportWithin is stopAndReport with a bound on each graceful stop.
func (m *Manager) stopAndReportWithin(runs []*managed, timeout time.Duration) {
	m.mu.Lock()
	aborted := m.aborted
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if aborted {
				r.abort()
				<-r.done
				return
			}
			at, err := r.stop(timeout)
			rt := r.route.Route
			if err != nil {
				m.log.Warn("dispatcher did not stop cleanly; its next owner resumes from its checkpoint", "dispatcher", r.d.ID(), "checkpoint", at, "err", err)
			}
			// A stop that had to be aborted knows only its checkpoint: not final.
			p := model.Progress{Checkpoint: at, Node: m.self, Epoch: rt.Epoch, Final: err == nil, Copy: r.d.Copied()}
			p.Handover = p.Final && rt.Status == model.PartitionDraining && m.saveState(rt, at)
			m.mu.Lock()
			m.putFinalLocked(finalKey(rt), &final{cf: rt.Changefeed, pid: rt.ID, p: p})
			m.mu.Unlock()
		}()
	}
	wg.Wait()
}

// stopAll stops every dispatcher and reports where each stopped, so
// whoever takes the partitions over starts exactly there; then it closes
// the sinks.
func (m *Manager) stopAll() {
	m.mu.Lock()
	runs := make([]*managed, 0, len(m.running))
	for _, r := range m.running {
		runs = append(runs, r)
	}
	m.running, m.byFeed, m.indexed = map[string]*managed{}, nil, 0
	aborted := m.aborted
	m.mu.Unlock()
	m.stopAndReport(runs)
	m.wg.Wait()
	if !aborted {
		m.awaitHandover()
	}
	m.mu.Lock()
	feeds := m.feeds
	m.feeds = map[model.ChangefeedID]*feed{}
	m.mu.Unlock()
	for _, f := range feeds {
		f.close()
	}
}
