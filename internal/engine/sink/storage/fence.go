package storage

import (
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// A dispatcher's files must be a prefix of what it was given: once one
// of its flushes fails, nothing it wrote after the failed rows may reach
// the bucket. Its successor (the next placement epoch, a new dispatcher
// id) replays from the checkpoint, which stands before the failed rows;
// a later batch of the failed dispatcher written meanwhile would leave a
// newer version of a key in front of the replayed older one, and a
// consumer reading the streams oldest first would apply them out of
// order. So the failure fences the dispatcher: what it still holds is
// refused, unwritten, and so is every later Write.

// fenced is what a failed dispatcher still held when it was fenced.
type fenced struct {
	batches []*sink.Batch
	bytes   int64
}

// fenceLocked drops what d holds beyond the failed flush; s.mu is held.
// Its batches are refused (refuse) once the lock is released.
func (s *Sink) fenceLocked(d *dispatcherState) fenced {
	f := fenced{batches: d.pending, bytes: d.bytes}
	s.notWaiting(d)
	s.freeDisk(d.bufs)
	s.dropLocked(d, d.bufs)
	d.bufs, d.pending, d.bytes, d.since, d.flushWanted = nil, nil, 0, time.Time{}, false
	// Flush waits for flushedSeq: everything written is settled (failed).
	d.flushedSeq, d.failedSeq = d.seq, d.seq
	s.spooled -= f.bytes
	s.spool.give(f.bytes)
	s.metrics.Backlog(-f.bytes, 0)
	if d.active {
		d.active = false
		s.metrics.ActiveTables(-1)
	}
	return f
}

// refuse gives back what a fenced dispatcher held and fails its batches
// with the flush's error, so a permanent error stays permanent.
func (s *Sink) refuse(f fenced, cause error) {
	if s.budget != nil && f.bytes > 0 {
		s.budget.release(f.bytes)
	}
	for _, b := range f.batches {
		if b.OnFlushed != nil {
			b.OnFlushed(cause)
		}
	}
}

// fencedErr is the error of a Write by a dispatcher whose flush failed;
// s.mu is held.
func (s *Sink) fencedErr(id string) error {
	if d := s.disp[id]; d != nil && d.failure != nil {
		return fmt.Errorf("storage sink: dispatcher %s writes nothing after its failed flush (%w); it resumes from its checkpoint as a new dispatcher", id, d.failure)
	}
	return nil
}
