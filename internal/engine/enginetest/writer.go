package enginetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Writer runs a write (an INSERT of a batch, say) again and again, a
// pause apart, until stopped: a workload a test sizes against what it
// measures (rows inserted faster than a snapshot copies them). Its
// first error stops it.
type Writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    atomic.Pointer[error]
	writes atomic.Int64
}

// StartWriter starts write every pause until Stop (or the end of t, so
// that nothing a cleanup closes is written on after it); write is given
// a context that Stop cancels.
func StartWriter(t testing.TB, write func(ctx context.Context) error, pause time.Duration) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if err := write(ctx); err != nil {
				if ctx.Err() == nil {
					w.err.Store(&err)
				}
				return
			}
			w.writes.Add(1)
			time.Sleep(pause)
		}
	}()
	return w
}

// Writes is how many writes returned without an error so far (one cut
// short by Stop may have committed all the same: count what the
// database holds, not this, where it matters).
func (w *Writer) Writes() int64 { return w.writes.Load() }

// Failed fails t if a write failed: a test waiting on something the
// writes drive checks it while it waits.
func (w *Writer) Failed(t testing.TB) {
	t.Helper()
	if err := w.err.Load(); err != nil {
		t.Fatalf("the writes stopped: %v", *err)
	}
}

// Stop cancels the writes, waits for the last to end, and fails t if one
// failed.
func (w *Writer) Stop(t testing.TB) {
	t.Helper()
	w.cancel()
	<-w.done
	w.Failed(t)
}
