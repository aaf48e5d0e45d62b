package storage_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A sink keeps the buffers of the files it wrote for its next batches,
// and lets go of them once it has been idle for a while: the spool does
// not count them, and a node of many changefeeds whose sinks once caught
// up held a spare of 32 MiB for each of them for good. The rows written
// before and after are all in the sink.
func TestAnIdleSinkLetsGoOfItsSpareBuffers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	uri := "file://" + dir + "?flush-interval=1s&max-flush-delay=0s"
	var clock atomic.Int64
	clock.Store(start / 1000)
	s, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGen(t, gen.Config{Tables: 1, Keys: 5000, Rate: 20000, Seed: 9})
	r, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	total := 0
	write := func(upTo model.Ts) {
		t.Helper()
		for {
			// Batches of 1,024 rows: buffers of a few hundred KiB, which
			// the sink keeps (it keeps none under 64 KiB).
			evs := sourcetest.Read(t, r, upTo, 1024)
			if len(evs) == 0 {
				break
			}
			total += len(evs)
			if err := s.Write(ctx, &sink.Batch{Dispatcher: "d1", Epoch: 1, Events: evs}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx, "d1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(model.TsFromMillis(start + 1000))
	if s.SpareBytes() == 0 {
		t.Fatal("the sink kept no buffer of the files it wrote")
	}
	clock.Add(5) // idle, within the flush intervals of a busy sink
	time.Sleep(300 * time.Millisecond)
	if s.SpareBytes() == 0 {
		t.Fatal("the sink let go of its buffers after 5 s idle")
	}
	clock.Add(6)
	deadline := time.Now().Add(10 * time.Second)
	for s.SpareBytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sink still keeps %d bytes of buffers after 11 s idle", s.SpareBytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	upTo := model.TsFromMillis(start + 2000)
	write(upTo)
	rep, err := verify.Storage(ctx, g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Events != uint64(total) || rep.Duplicates != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify: %+v (wrote %d)", rep, total)
	}
}
