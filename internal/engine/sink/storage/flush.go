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
// slots are free: those that must go now (forced, a full file) first,
// then the oldest rows first (dueQueue); what finds no slot is due again
// on the next round, which the end of any flush triggers. Oldest first
// matters when the bucket is slower than the tables' flushes (tens of
// thousands of tables on a local disk): picked in map order, some tables
// waited unboundedly and held the checkpoint back for good.
func (s *Sink) flushRound() {
	s.spare.expire()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	pressure := s.pressure
	s.pressure = false
	if now.Sub(s.swept) > s.cfg.StateTTL/4 {
		s.swept = now
		s.sweepLocked(now)
	}
	due := func(d *dispatcherState) string { return s.dueReason(d, now, pressure) }
	for len(s.slots) < cap(s.slots) {
		d, reason := s.due.next(due)
		if d == nil {
			return
		}
		s.slots <- struct{}{} // free: checked above, and only rounds take slots
		j := flushJob{d: d, bufs: d.bufs, batches: d.pending, bytes: d.bytes, seq: d.seq}
		s.notWaiting(d)
		d.bufs, d.pending, d.bytes, d.since, d.flushWanted, d.flushing = nil, nil, 0, time.Time{}, false, true
		s.metrics.FlushTask(reason)
		s.metrics.Backlog(-j.bytes, j.bytes)
		s.jobs.Add(1)
		go s.flush(j)
	}
	if pressure && !s.due.empty() {
		s.pressure = true // more due than slots
	}
}

// notWaiting takes d's rows out of the fanout caps' counts (a flush took
// them, or a fence dropped them); s.mu is held.
func (s *Sink) notWaiting(d *dispatcherState) {
	if d.bytes > 0 {
		s.waiting--
		s.queued -= d.bytes
	}
}

// sweepLocked forgets the state of tables and dispatchers unused for
// StateTTL; s.mu is held.
func (s *Sink) sweepLocked(now time.Time) {
	for p, used := range s.schemas {
		if now.Sub(used) > s.cfg.StateTTL {
			delete(s.schemas, p) // checked against the bucket again on its next use
		}
	}
	for id, d := range s.disp {
		if len(d.pending) == 0 && !d.flushing && d.appending == 0 && d.flushedSeq == d.seq && now.Sub(d.lastWrite) > s.cfg.StateTTL {
			// Every placement epoch is a new dispatcher, so the old ones
			// must go; one that returns reads its numbering back from its
			// index files.
			delete(s.disp, id)
		}
	}
}

// dueReason says why a dispatcher with rows must be flushed now; "" if
// it need not be yet.
func (s *Sink) dueReason(d *dispatcherState, now time.Time, pressure bool) string {
	age := now.Sub(d.since)
	switch {
	case d.bytes >= s.cfg.fileTarget():
		return ReasonSize
	case d.flushWanted:
		return d.flushReason
	case pressure, s.queued > s.cfg.bufferedCap():
		return ReasonBytesCap
	case s.waiting > s.cfg.MaxActiveTables:
		return ReasonFanout
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
	err := s.writeFiles(j.d, j.bufs, j.batches)
	s.freeDisk(j.bufs) // written or failed: the disk spool's room is free
	discardStaged(j.bufs)
	for _, db := range j.bufs {
		// Written or failed, the bucket holds no reference to them
		// (Put copies or writes them before it returns).
		for _, c := range db.chunks {
			s.spare.put(c)
		}
		db.chunks = nil
	}
	if err != nil {
		s.log.Warn("storage sink: flush failed; the dispatcher will resume from its checkpoint", "dispatcher", j.d.id, "err", err)
	}
	// What the job held is given back before its batches are acked, so
	// that an ack means its bytes are no longer counted (the gauges, the
	// spool, the node's budget)...
	s.mu.Lock()
	s.spooled -= j.bytes
	s.spool.give(j.bytes)
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
	// Never back: a dispatcher fenced while this flush ran (superseded,
	// progress.go) counts every batch it was given as settled already.
	j.d.flushedSeq = max(j.d.flushedSeq, j.seq)
	var dropped fenced
	if err != nil {
		j.d.failedSeq, j.d.failure = j.seq, err
		// The directory indexes are unknown after a failed write: read
		// them again before the next file.
		j.d.nextIndex = map[string]uint64{}
		if r := j.d.resumed; r != nil {
			// Its next flush writes the progress object first: the
			// notes of this one's files, if some were written, may
			// not be followed.
			r.recorded = false
		}
		dropped = s.fenceLocked(j.d)
	} else if j.d.appending > 0 {
		j.d.requeue = true // queued when its write ends
	} else if j.d.waits() {
		// Rows that came during the flush wait for the next one.
		s.due.add(j.d)
		if j.d.flushWanted || j.d.bytes >= s.cfg.fileTarget() {
			s.due.urge(j.d)
		}
	} else {
		j.d.flushWanted = false
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.refuse(dropped, err)
	<-s.slots
	s.wakeFlusher()
}
