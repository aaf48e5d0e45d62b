package storage

import (
	"context"
	"sync"
)

// Budget bounds the encoded rows every storage sink of a node holds
// together (seed 004: one memory cap per node, however many changefeeds
// run on it; each sink's spool-max-bytes still bounds that sink). A
// write that does not fit waits, and every sink sharing the budget is
// urged to write what it holds now, so that the wait is a flush long,
// not an interval.
type Budget struct {
	room *room

	mu    sync.Mutex
	sinks map[*Sink]struct{}
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget {
	b := &Budget{sinks: map[*Sink]struct{}{}}
	b.room = newRoom(max, b.urgeAll)
	return b
}

// Used is the bytes held now.
func (b *Budget) Used() int64 { return b.room.held() }

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

// acquire takes n bytes, waiting while they do not fit (until ctx ends
// or abort is closed). One write larger than the whole budget goes
// through when nothing else is held, so it cannot wait forever.
func (b *Budget) acquire(ctx context.Context, n int64, abort <-chan struct{}) error {
	return b.room.take(ctx, n, abort)
}

// urgeAll has every sink sharing the budget write what it holds now: a
// writer waits.
func (b *Budget) urgeAll() {
	b.mu.Lock()
	sinks := make([]*Sink, 0, len(b.sinks))
	for s := range b.sinks {
		sinks = append(sinks, s)
	}
	b.mu.Unlock()
	// The sinks take their own locks: not under this one.
	for _, s := range sinks {
		s.urge()
	}
}

func (b *Budget) release(n int64) { b.room.give(n) }
