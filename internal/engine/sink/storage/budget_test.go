package storage_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Seed 004: one memory cap per node across all its changefeeds. Two
// sinks (two changefeeds) share a 1 MiB budget, each with a spool far
// larger. The first holds about 0.9 MiB that nothing would flush for ten
// minutes; the second's write waits for the budget, and the wait urges
// the first to write what it holds, so the second goes on at once after.
// Nothing is held once both are flushed.
func TestSinksShareOneNodeBudget(t *testing.T) {
	budget := storage.NewBudget(1 << 20)
	opts := "?flush-interval=10m&max-flush-delay=0s&spool-max-bytes=268435456"
	open2 := func() (*storage.Sink, string) {
		dir := t.TempDir()
		s, err := storage.OpenWith(context.Background(), "file://"+dir+opts, quiet(), storage.Env{Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, dir
	}
	a, aDir := open2()
	b, _ := open2()
	g := newGen(t, gen.Config{Tables: 2, Keys: 2000, Rate: 20000})
	ra, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	rb, _ := g.Open(model.Span{Table: "t0002"}, model.TsFromMillis(start))
	var first []source.Event
	for size := 0; size < 900<<10; {
		evs := sourcetest.Read(t, ra, model.TsFromMillis(start+60_000), 100)
		first = append(first, evs...)
		size += 330 * len(evs)
	}
	var flushed atomic.Bool
	if err := a.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: first, OnFlushed: func(err error) { flushed.Store(err == nil) }}); err != nil {
		t.Fatal(err)
	}
	if used := budget.Used(); used < 800<<10 {
		t.Fatalf("the budget counts %d bytes after the first write; want about 0.9 MiB", used)
	}
	second := sourcetest.Read(t, rb, model.TsFromMillis(start+60_000), 1000)
	returned := make(chan error, 1)
	go func() { returned <- b.Write(context.Background(), &sink.Batch{Dispatcher: "d2", Events: second}) }()
	select {
	case err := <-returned:
		// The first sink's flush writes its file, gives its bytes back
		// (which lets the second write in), then acks: the file is there
		// by now, the ack follows at once.
		if err != nil || dataFiles(t, aDir) == 0 {
			t.Fatalf("the second sink's write returned (%v) before the first sink wrote what it held", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !flushed.Load() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !flushed.Load() {
			t.Fatal("the first sink's batch was never acked after its flush")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write waiting for the node's budget did not make the other sink write what it holds")
	}
	if err := b.Flush(context.Background(), "d2"); err != nil {
		t.Fatal(err)
	}
	if used := budget.Used(); used != 0 {
		t.Fatalf("%d bytes still counted after every flush", used)
	}
	// A writer waiting on the budget is freed by its context.
	if err := a.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: sourcetest.Read(t, ra, model.TsFromMillis(start+120_000), 3000)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	big := sourcetest.Read(t, rb, model.TsFromMillis(start+120_000), 3000)
	if err := b.Write(ctx, &sink.Batch{Dispatcher: "d2", Events: big}); err != nil && ctx.Err() == nil {
		t.Fatalf("a waiting write failed without its context ending: %v", err)
	}
}

// dataFiles counts the data files (CDC<index>.<ext>) under dir.
func dataFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "CDC") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
