package bucket

import (
	"context"
	"sync"
)

// groupSync makes what many writers wrote to one file system durable
// with one call for all of them (a group commit): a writer asks after
// its writes and waits for a sync that began after it asked. One
// fsync per file and per directory, four a flush of a storage sink,
// bound a disk: 5,000 tables at 1,000 rows a second waited 3.3 s (p99)
// for their acks against 0.29 s unsynced; a sync of the file system
// (Linux's syncfs) serves every flush waiting at once.
type groupSync struct {
	sync  func() error
	close func() error

	mu      sync.Mutex
	next    *syncRound // the round the next writer joins (nil: none asked)
	running bool
	// failed is the first sync's error, every later round's too: Linux
	// reports a failed write back once, to the first sync after it, and
	// a writer whose pages failed during another's round would find its
	// own round clean.
	failed error
}

// syncRound is one sync and the writers it serves.
type syncRound struct {
	done chan struct{}
	err  error
}

// wait returns once a sync that began after the call has ended, with its
// error.
func (g *groupSync) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.next == nil {
		g.next = &syncRound{done: make(chan struct{})}
	}
	r := g.next
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run syncs round after round while writers ask.
func (g *groupSync) run() {
	for {
		g.mu.Lock()
		r := g.next
		g.next = nil
		if r == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		failed := g.failed
		g.mu.Unlock()
		err := g.sync()
		g.mu.Lock()
		if err != nil && g.failed == nil {
			g.failed = err
		}
		r.err = err
		if failed != nil {
			r.err = failed
		}
		g.mu.Unlock()
		close(r.done)
	}
}
