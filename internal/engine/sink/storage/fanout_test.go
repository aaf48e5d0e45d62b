package storage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
)

// Seed 004 §5.1: the fanout caps. One row in each of 1,000 tables, the
// interval ten minutes away and no delay: with max-active-tables=100 the
// oldest are flushed until 100 wait, so 900 are acked at once (reason
// fanout) and the last 100 wait for their interval. With
// max-buffered-bytes the same happens by bytes. Every callback comes
// exactly once: the waiting ones fail when the sink closes.
func TestTheFanoutCapsFlushTheOldestAndLoseNoCallback(t *testing.T) {
	const tables = 1000
	for _, tc := range []struct {
		name, params, reason string
		waiting              func(int) bool // how many may wait
	}{
		{"tables", "max-active-tables=100", storage.ReasonFanout, func(n int) bool { return n == 100 }},
		// A row is a few hundred bytes: 64 KiB holds a few hundred.
		{"bytes", "max-buffered-bytes=65536", storage.ReasonBytesCap, func(n int) bool { return n > 50 && n < 700 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newCounts()
			s, err := storage.OpenWith(context.Background(), "mem://?flush-interval=10m&max-flush-delay=0s&"+tc.params, quiet(), storage.Env{Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			acked := oneRowPerTable(t, s, tables)
			got := 0
			deadline := time.After(time.Minute)
		drain:
			for {
				select {
				case err := <-acked:
					if err != nil {
						t.Fatalf("ack %d: %v", got, err)
					}
					got++
				case <-time.After(time.Second):
					break drain // a second without an ack: the rest wait
				case <-deadline:
					t.Fatalf("still acking after a minute (%d)", got)
				}
			}
			if !tc.waiting(tables - got) {
				t.Fatalf("%d of %d tables acked; %d wait for the interval, not what %s allows", got, tables, tables-got, tc.params)
			}
			if n := m.reason(tc.reason); n != got {
				t.Fatalf("%d flushes counted with reason %s; want one per acked table (%d): %v", n, tc.reason, got, m.reasons)
			}
			// The rest are not lost: they fail, once each, when the sink
			// closes (their dispatchers resume from their checkpoints).
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for i := got; i < tables; i++ {
				select {
				case err := <-acked:
					if err == nil {
						t.Fatalf("a waiting table was acked by Close")
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%d callbacks of %d never came", tables-i, tables)
				}
			}
			select {
			case <-acked:
				t.Fatal("a callback came twice")
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

// Batches without rows (a dispatcher's position moved, nothing changed)
// hold nothing: they do not count towards max-active-tables. Counted,
// the idle dispatchers of a 100,000-table changefeed kept the cap
// exceeded for good, and every empty batch was flushed on its own.
func TestEmptyBatchesDoNotCountTowardsTheFanoutCap(t *testing.T) {
	const dispatchers = 1000
	m := newCounts()
	s, err := storage.OpenWith(context.Background(), "mem://?flush-interval=10m&max-flush-delay=200ms&max-active-tables=100", quiet(), storage.Env{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked := make(chan error, dispatchers)
	for i := 0; i < dispatchers; i++ {
		b := &sink.Batch{Dispatcher: fmt.Sprintf("d%d", i), Epoch: 1, OnFlushed: func(err error) { acked <- err }}
		if err := s.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < dispatchers; i++ {
		select {
		case err := <-acked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d empty batches acked", i, dispatchers)
		}
	}
	if n := m.reason(storage.ReasonFanout); n != 0 {
		t.Fatalf("%d flushes counted as fanout for batches without rows: %v", n, m.reasons)
	}
}
