package storage

import (
	"context"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// Budget bounds the encoded rows every storage sink of a node holds
// together (seed 004: one memory cap per node, however many changefeeds
// run on it; each sink's spool-max-bytes still bounds that sink). A
// write that does not fit waits, and every sink sharing the budget is
// urged to write what it holds now, so that the wait is a flush long,
// not an interval.
type Budget struct {
	max int64

	mu    sync.Mutex
	cond  *sync.Cond
	used  int64
	sinks map[*Sink]struct{}
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget {
	b := &Budget{max: max, sinks: map[*Sink]struct{}{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Used is the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *Budget) join(s *Sink) {
	b.mu.Lock()
	b.sinks[s] = struct{}{}
	b.mu.Unlock()
}

func (b *Budget) leave(s *Sink) {
	b.mu.Lock()
	delete(b.sinks, s)
	b.mu.Unlock()
}

// acquire takes n bytes, waiting while they do not fit. One write larger
// than the whole budget goes through when nothing else is held, so it
// cannot wait forever.
func (b *Budget) acquire(ctx context.Context, n int64, closed func() error) error {
	urged := false
	b.mu.Lock()
	defer b.mu.Unlock()
	fits := func() bool {
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			return true
		}
		return false
	}
	return sink.WaitCond(ctx, b.cond, func() bool {
		if fits() {
			return true
		}
		if urged {
			return false
		}
		urged = true
		sinks := make([]*Sink, 0, len(b.sinks))
		for s := range b.sinks {
			sinks = append(sinks, s)
		}
		// The sinks take their own locks: not under this one. A release
		// meanwhile is seen by the check after.
		b.mu.Unlock()
		for _, s := range sinks {
			s.urge()
		}
		b.mu.Lock()
		return fits()
	}, closed)
}

// wakeAll wakes the writers waiting (a sink closed).
func (b *Budget) wakeAll() {
	b.mu.Lock()
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *Budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}
