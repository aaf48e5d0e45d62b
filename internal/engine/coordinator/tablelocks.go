package coordinator

import (
	"context"
	"fmt"
	"sync"

	"github.com/cdcctl/cdcctl/internal/model"
)

// lockTables takes a changefeed's lock for a change of its tables, until
// ctx ends; unlock releases it.
func (c *Coordinator) lockTables(ctx context.Context, id model.ChangefeedID) (unlock func(), err error) {
	l := c.retabling.want(id)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; c.retabling.done(id, l) }, nil
	case <-ctx.Done():
		c.retabling.done(id, l)
		return nil, fmt.Errorf("another change of changefeed %s's tables is under way: %w", id, ctx.Err())
	}
}

// tableLocks are the changefeeds' locks for changes of their tables. A
// lock is forgotten when no one holds or waits for it: kept for every
// changefeed ever changed, they were never let go, removed changefeeds'
// too.
type tableLocks struct {
	mu    sync.Mutex
	locks map[model.ChangefeedID]*tableLock
}

type tableLock struct {
	ch    chan struct{} // of one: held while it holds a value
	users int           // holding or waiting
}

// want is id's lock, counted as wanted until done.
func (t *tableLocks) want(id model.ChangefeedID) *tableLock {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[id]
	if l == nil {
		if t.locks == nil {
			t.locks = map[model.ChangefeedID]*tableLock{}
		}
		l = &tableLock{ch: make(chan struct{}, 1)}
		t.locks[id] = l
	}
	l.users++
	return l
}

// done says one who wanted l holds or waits for it no more.
func (t *tableLocks) done(id model.ChangefeedID, l *tableLock) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(t.locks, id)
	}
}

// count is how many changefeeds' locks are kept.
func (t *tableLocks) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}
