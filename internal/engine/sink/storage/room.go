package storage

import (
	"context"
	"slices"
	"sync"
)

// room bounds the bytes writers hold, and lets waiting writers in in
// their order of arrival, each woken only when it fits. (A sync.Cond
// woke every waiting writer on every release: with tens of thousands of
// dispatchers waiting for a full spool, waking them took a third of a
// capture's CPU, and each held its encoded rows the while.)
type room struct {
	max int64
	// onWait, if set, is called (without the room's lock) when a writer
	// starts to wait: the holders should let go soon.
	onWait func()

	mu    sync.Mutex
	used  int64
	queue []*roomWaiter
}

type roomWaiter struct {
	n        int64
	admitted chan struct{}
	in       bool // admitted; r.mu
}

func newRoom(max int64, onWait func()) *room { return &room{max: max, onWait: onWait} }

// fitsLocked says whether n more bytes fit. One writer larger than the
// room goes in when nothing is held, so it cannot wait forever.
func (r *room) fitsLocked(n int64) bool { return r.used == 0 || r.used+n <= r.max }

// take waits until n bytes fit, behind the writers that came first, and
// takes them; it gives up when ctx ends or abort is closed.
func (r *room) take(ctx context.Context, n int64, abort <-chan struct{}) error {
	r.mu.Lock()
	if len(r.queue) == 0 && r.fitsLocked(n) {
		r.used += n
		r.mu.Unlock()
		return nil
	}
	w := &roomWaiter{n: n, admitted: make(chan struct{})}
	r.queue = append(r.queue, w)
	r.mu.Unlock()
	if r.onWait != nil {
		r.onWait()
	}
	var err error
	select {
	case <-w.admitted:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-abort:
		err = errSinkClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.in {
		r.used -= n // admitted as it gave up: give it back
	} else if i := slices.Index(r.queue, w); i >= 0 {
		r.queue = slices.Delete(r.queue, i, i+1)
	}
	r.admitLocked()
	return err
}

// force takes n bytes without waiting, fitting or not (an admitted
// write's rows turned out larger than estimated).
func (r *room) force(n int64) {
	r.mu.Lock()
	r.used += n
	r.mu.Unlock()
}

// give returns n bytes and lets in the writers that now fit.
func (r *room) give(n int64) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.used -= n
	r.admitLocked()
	r.mu.Unlock()
}

func (r *room) admitLocked() {
	for len(r.queue) > 0 && r.fitsLocked(r.queue[0].n) {
		w := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.used += w.n
		w.in = true
		close(w.admitted)
	}
}

// held is the bytes taken now.
func (r *room) held() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// waiting is how many writers wait.
func (r *room) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}
