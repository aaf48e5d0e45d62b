package storage

import (
	"context"
	"sync/atomic"
)

// admit takes n bytes of the node's budget and of the spool, waiting
// (backpressure) while they do not fit.
func (s *Sink) admit(ctx context.Context, n int64) error {
	if s.budget != nil {
		if err := s.budget.acquire(ctx, n, s.stop); err != nil {
			return err
		}
	}
	// A full spool makes the write wait for a flush (spool.onWait has
	// the flusher write what it holds now).
	if err := s.spool.take(ctx, n, s.stop); err != nil {
		if s.budget != nil {
			s.budget.release(n)
		}
		return err
	}
	return nil
}

// release gives back n admitted bytes.
func (s *Sink) release(n int64) {
	s.spool.give(n)
	if s.budget != nil {
		s.budget.release(n)
	}
}

// resize sets an admitted write's bytes from its estimate to its encoded
// size. A write larger than its estimate takes the rest without waiting:
// it is encoded already, and waiting while holding room could leave
// every holder waiting for the others with nothing to flush. The
// overshoot is one estimate's error per write admitted at once.
func (s *Sink) resize(estimated, size int64) {
	switch {
	case size < estimated:
		s.release(estimated - size)
	case size > estimated:
		s.spool.force(size - estimated)
		if s.budget != nil {
			s.budget.room.force(size - estimated)
		}
	}
}

// rowSize estimates a batch's encoded bytes from the bytes per row of the
// sink's recent writes.
type rowSize struct{ perRow atomic.Int64 }

// firstRowBytes is the estimate before any write: about a canal-json row
// of a few short columns.
const firstRowBytes = 512

func (r *rowSize) estimate(rows int) int64 {
	per := r.perRow.Load()
	if per == 0 {
		per = firstRowBytes
	}
	return per * int64(rows)
}

// learn moves the estimate an eighth of the way towards a write's bytes
// per row (a racing update may be lost; it is an estimate).
func (r *rowSize) learn(rows int, size int64) {
	if rows == 0 {
		return
	}
	got := max(1, size/int64(rows))
	per := r.perRow.Load()
	if per == 0 {
		r.perRow.Store(got)
		return
	}
	r.perRow.Store(per + (got-per)/8)
}
