package kafka

// This file settles what was sent: a batch's count of messages down to
// its flush ack, and the records Kafka acknowledged or refused, which
// give back their buffer bytes and their dispatchers' outstanding counts.

import (
	"errors"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// batchState counts a batch's messages down to its flush ack.
type batchState struct {
	mu        sync.Mutex
	b         *sink.Batch
	remaining int
	done      bool
}

func (bs *batchState) settle(n int, err error) {
	bs.mu.Lock()
	if bs.done {
		bs.mu.Unlock()
		return
	}
	bs.remaining -= n
	finish := err != nil || bs.remaining == 0
	bs.done = finish
	bs.mu.Unlock()
	if finish && bs.b.OnFlushed != nil {
		bs.b.OnFlushed(err)
	}
}

// finish settles records: their sync waiters, their batches' flush acks,
// their dispatchers' outstanding counts. A failure fences the record's
// dispatcher first, so nothing of it is sent afterwards. Runs without
// s.mu (a flush ack may call back into the sink).
func (s *Sink) finish(recs []*record, err error) {
	if len(recs) == 0 {
		return
	}
	size := 0
	for i := 0; i < len(recs); {
		r := recs[i]
		size += r.size()
		md := r.md
		if md.sync != nil {
			md.sync <- err
			i++
			continue
		}
		// A run of records of one batch settles together.
		n := 1
		for i+n < len(recs) && recs[i+n].md == md {
			size += recs[i+n].size()
			n++
		}
		i += n
		derr := err
		if derr != nil {
			if md.fence.shut(derr) {
				// Once per dispatcher and epoch, not per message, and
				// aggregated per interval (faillog.go).
				s.failures.failed(md.dispatcher, md.epoch, IsTransient(derr), derr)
			}
			if errors.Is(derr, errFenced) || errors.Is(derr, errSinkClosed) {
				derr = md.fence.cause(derr)
			}
			derr = s.dispatcherError(md.dispatcher, md.epoch, derr)
		}
		// The batch's ack first: Flush returning means every callback ran.
		md.batch.settle(n, derr)
	}
	s.mu.Lock()
	for i := 0; i < len(recs); {
		md := recs[i].md
		n := 1
		for i+n < len(recs) && recs[i+n].md == md {
			n++
		}
		i += n
		if md.sync == nil {
			s.releaseLocked(md.dispatcher, n)
		}
	}
	s.unbufferLocked(size)
	s.mu.Unlock()
}

// unbufferLocked gives back the buffer bytes of settled records, waking
// writers waiting for room. s.mu is held.
func (s *Sink) unbufferLocked(size int) {
	before := s.buffered
	s.buffered -= size
	if before >= s.cfg.BufferMemory && s.buffered < s.cfg.BufferMemory {
		s.room.Broadcast()
	}
}

func (s *Sink) releaseLocked(dispatcher string, n int) {
	s.outstanding[dispatcher] -= n
	if s.outstanding[dispatcher] <= 0 {
		delete(s.outstanding, dispatcher)
		if f := s.fences[dispatcher]; f != nil && (!f.closed.Load() || f.isForgotten()) {
			// Nothing in flight: a new batch makes a new one. A fenced
			// dispatcher keeps its fence (every later batch of it fails)
			// until it is gone.
			delete(s.fences, dispatcher)
		}
		s.cond.Broadcast() // Flush waits for this
	}
}
