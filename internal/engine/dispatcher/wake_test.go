package dispatcher_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink/blackhole"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// changingReader has nothing to read; it records when it is read, and
// its log's change signal is a channel the test closes (source.Notifier).
type changingReader struct {
	mu     sync.Mutex
	reads  []time.Time
	change chan struct{}
	n      atomic.Int64
}

func (r *changingReader) Read(context.Context, model.Ts, int) ([]source.Event, error) {
	r.mu.Lock()
	r.reads = append(r.reads, time.Now())
	r.mu.Unlock()
	r.n.Add(1)
	return nil, nil
}
func (r *changingReader) Position() model.Ts { return 1 }
func (r *changingReader) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change
}

// signal closes the current change signal and hands out a new one, as
// the event log does at each append or resolve.
func (r *changingReader) signal() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.change)
	r.change = make(chan struct{})
	return time.Now()
}

func (r *changingReader) readAt(i int) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[i]
}

type changingSource struct{ r *changingReader }

func (s changingSource) Open(model.Span, model.Ts) (source.Reader, error) { return s.r, nil }
func (s changingSource) DDLs(string, model.Ts, model.Ts) []source.Event   { return nil }

// A partition with nothing to read reads again when its log changes (an
// idle stream's next resolved position), not a back-off later, but no
// sooner than its wake gap after its last read: thousands of a node's
// partitions wake at each change of their log.
func TestAnIdlePartitionReadsWhenItsLogChanges(t *testing.T) {
	const idle = 5 * time.Second // the back-off: nothing here waits it out
	gap := 300 * time.Millisecond
	r := &changingReader{change: make(chan struct{})}
	d, err := dispatcher.New(dispatcher.Config{ID: "p1.1", Span: model.Span{Table: "t"}, Source: changingSource{r}, Sink: blackhole.New(),
		Now: func() model.Ts { return 2 }, Idle: idle, WakeGap: func() time.Duration { return gap }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }() //nolint:errcheck // cancelled below
	defer func() { cancel(); <-done }()
	waitReads := func(n int64, what string) {
		t.Helper()
		for deadline := time.Now().Add(idle / 2); r.n.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d reads after %v; the back-off (%v) would be the first to end", what, r.n.Load(), idle/2, idle)
			}
		}
	}
	waitReads(1, "the first read")
	// A change at once after the read: the next read waits out the gap.
	r.signal()
	waitReads(2, "a change right after a read")
	if got := r.readAt(1).Sub(r.readAt(0)); got < gap {
		t.Fatalf("read again %v after the last read; the wake gap is %v", got, gap)
	}
	// A change after the gap: read at once.
	time.Sleep(gap + 100*time.Millisecond)
	r.signal()
	waitReads(3, "a change after the gap")
}
