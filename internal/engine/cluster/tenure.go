package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Tenure is how long this member may still act on the work it was given.
//
// Losing the session is noticed by a goroutine, and a process frozen past
// its TTL (SIGSTOP, a paused VM, a long stall) wakes with every goroutine
// at once: a sink may write rows before anything has noticed that the
// lease expired and the partitions run elsewhere, so an older version of
// a row lands after the new owner's newer one. Tenure answers from the
// clock instead: the lease lasts at least until the last renewal's answer
// plus the TTL (etcd may extend a lease, never shorten it), measured on
// the monotonic clock, which runs on while the process is stopped. A
// writer asks before each irreversible write (a data file, a message on
// the wire), and a member that cannot tell writes nothing.
//
// What it cannot close: a write that starts within the tenure and is
// itself stalled past the lease. The margin is kept for it.
type Tenure struct {
	ttl, margin time.Duration
	base        time.Time    // monotonic origin of renewed
	renewed     atomic.Int64 // nanoseconds after base of the last renewal's answer
	ended       atomic.Bool  // the keepalive stopped: no renewal will come

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every renewal and at the end
}

// newTenure starts a tenure whose lease was granted (or renewed) at
// granted.
func newTenure(ttl time.Duration, granted time.Time) *Tenure {
	t := &Tenure{ttl: ttl, margin: ttl / 4, base: granted, changed: make(chan struct{})}
	return t
}

func (t *Tenure) signal() {
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// renew records a renewal answered at `at`.
func (t *Tenure) renew(at time.Time) {
	t.renewed.Store(int64(at.Sub(t.base)))
	t.signal()
}

// end records that the lease will not be renewed again.
func (t *Tenure) end() {
	t.ended.Store(true)
	t.signal()
}

// left is how long the lease lasts at least, from now.
func (t *Tenure) left() time.Duration {
	return time.Duration(t.renewed.Load()) + t.ttl - time.Since(t.base)
}

// Valid reports, without waiting, that the lease lasts at least the
// margin longer: the hot path of writers.
func (t *Tenure) Valid() bool { return !t.ended.Load() && t.left() > t.margin }

// Hold returns nil when the lease lasts at least the margin longer,
// waiting for a renewal while that is unsure (a renewal late under load);
// an error once the lease may have expired, or will never be renewed. It
// waits at most until the lease's end.
func (t *Tenure) Hold(ctx context.Context) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		if t.ended.Load() {
			return fmt.Errorf("this node's session lease is no longer renewed: its partitions may run on another node, so it writes nothing more")
		}
		left := t.left()
		if left > t.margin {
			return nil
		}
		if left <= 0 {
			return fmt.Errorf("this node's session lease was last renewed %s ago, past its TTL (%s): its partitions may run on another node, so it writes nothing more (was the process stopped?)",
				(t.ttl - left).Round(time.Millisecond), t.ttl)
		}
		wait := time.NewTimer(left)
		select {
		case <-ch:
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		wait.Stop()
	}
}
