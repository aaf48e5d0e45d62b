package storage

// This file schedules the sink's flushes: which dispatchers are due, in
// which order when the slots are fewer than they, and what a flush gives
// back when its files are written.

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

func (s *Sink) runFlusher() {
	defer close(s.done)
	due := s.cfg.FlushInterval
	if s.cfg.MaxFlushDelay > 0 {
		due = min(due, s.cfg.MaxFlushDelay)
	}
	tick := max(5*time.Millisecond, min(due/4, 100*time.Millisecond))
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-t.C:
		}
		s.flushRound()
	}
}

// flushJob is one dispatcher's flush: its buffered rows and batches.
type flushJob struct {
	d       *dispatcherState
	bufs    []*dirBuffer
	batches []*sink.Batch
	bytes   int64
	seq     uint64
}

// flushRound starts the flush of the dispatchers that are due, as many as
// slots are free, those that must go now (forced, a full file) first,
// then the oldest rows first; what finds no slot is due again on the next
// round, which the end of any flush triggers. Oldest first matters when
// the bucket is slower than the tables' flushes (tens of thousands of
// tables on a local disk): picked in map order, some tables waited
// unboundedly and held the checkpoint back for good.
func (s *Sink) flushRound() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	pressure := s.pressure
	s.pressure = false
	picks := flushPicks{n: cap(s.slots) - len(s.slots)}
	if now.Sub(s.swept) > s.cfg.StateTTL/4 {
		s.swept = now
		for p, used := range s.schemas {
			if now.Sub(used) > s.cfg.StateTTL {
				delete(s.schemas, p) // checked against the bucket again on its next use
			}
		}
	}
	for id, d := range s.disp {
		if len(d.pending) == 0 && !d.flushing && d.flushedSeq == d.seq && now.Sub(d.lastWrite) > s.cfg.StateTTL {
			// Every placement epoch is a new dispatcher, so the old ones
			// must go; one that returns reads its numbering back from its
			// index files.
			delete(s.disp, id)
			continue
		}
		if d.flushing || len(d.pending) == 0 {
			if len(d.pending) == 0 && d.flushWanted && !d.flushing {
				d.flushWanted = false
			}
			continue
		}
		reason := s.dueReason(d, now, pressure)
		if reason == "" {
			continue
		}
		if !picks.offer(dueFlush{d: d, reason: reason}) {
			s.pressure = s.pressure || pressure // more due than slots
		}
	}
	for _, p := range picks.best {
		s.slots <- struct{}{} // free: counted above, and only rounds take slots
		d := p.d
		j := flushJob{d: d, bufs: d.bufs, batches: d.pending, bytes: d.bytes, seq: d.seq}
		d.bufs, d.pending, d.bytes, d.since, d.flushWanted, d.flushing = nil, nil, 0, time.Time{}, false, true
		s.metrics.FlushTask(p.reason)
		s.metrics.Backlog(-j.bytes, j.bytes)
		s.jobs.Add(1)
		go s.flush(j)
	}
}

// dueFlush is a dispatcher due for a flush and why.
type dueFlush struct {
	d      *dispatcherState
	reason string
}

// before says whether a goes before b: forced and full-file flushes
// first, then the oldest rows.
func (a dueFlush) before(b dueFlush) bool {
	ua, ub := a.reason == ReasonForced || a.reason == ReasonSize, b.reason == ReasonForced || b.reason == ReasonSize
	if ua != ub {
		return ua
	}
	return a.d.since.Before(b.d.since)
}

// flushPicks keeps the first n due flushes by before: a round looks at
// every dispatcher once and keeps as many as slots are free.
type flushPicks struct {
	n    int
	best []dueFlush // sorted by before
}

// offer keeps f if it is among the first n; it returns false when some
// due flush (f or one it pushed out) is left for a later round.
func (p *flushPicks) offer(f dueFlush) bool {
	i := len(p.best)
	for i > 0 && f.before(p.best[i-1]) {
		i--
	}
	if i >= p.n {
		return false
	}
	p.best = append(p.best, dueFlush{})
	copy(p.best[i+1:], p.best[i:])
	p.best[i] = f
	if len(p.best) > p.n {
		p.best = p.best[:p.n]
		return false
	}
	return true
}

// dueReason says why a dispatcher with rows must be flushed now; "" if
// it need not be yet.
func (s *Sink) dueReason(d *dispatcherState, now time.Time, pressure bool) string {
	age := now.Sub(d.since)
	switch {
	case d.bytes >= s.cfg.fileTarget():
		return ReasonSize
	case d.flushWanted:
		return ReasonForced
	case pressure:
		return ReasonBytesCap
	case age >= s.cfg.FlushInterval:
		return ReasonInterval
	case s.cfg.MaxFlushDelay > 0 && age >= s.cfg.MaxFlushDelay:
		return ReasonDelay
	}
	return ""
}

// flush writes one job's files and acks its batches.
func (s *Sink) flush(j flushJob) {
	defer s.jobs.Done()
	err := s.writeFiles(j.d, j.bufs)
	if err != nil {
		s.log.Warn("storage sink: flush failed; the dispatcher will resume from its checkpoint", "dispatcher", j.d.id, "err", err)
	}
	// What the job held is given back before its batches are acked, so
	// that an ack means its bytes are no longer counted (the gauges, the
	// spool, the node's budget)...
	s.mu.Lock()
	s.spooled -= j.bytes
	s.metrics.Backlog(0, -j.bytes)
	if j.d.active && len(j.d.pending) == 0 {
		j.d.active = false
		s.metrics.ActiveTables(-1)
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if s.budget != nil {
		// Not under s.mu: a wait for the budget urges the sinks under
		// the budget's lock.
		s.budget.release(j.bytes)
	}
	// ...and the batches are acked before Flush can see them flushed: a
	// Flush that returns has every batch before it acked.
	for _, b := range j.batches {
		if b.OnFlushed != nil {
			b.OnFlushed(err)
		}
	}
	s.mu.Lock()
	j.d.flushing = false
	j.d.flushedSeq = j.seq
	var dropped fenced
	if err != nil {
		j.d.failedSeq, j.d.failure = j.seq, err
		// The directory indexes are unknown after a failed write: read
		// them again before the next file.
		j.d.nextIndex = map[string]uint64{}
		dropped = s.fenceLocked(j.d)
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.refuse(dropped, err)
	<-s.slots
	s.wakeFlusher()
}
