package storage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Writes that wait for spool room hold their batches only, not their
// encoded rows too: admission comes before encoding. The bucket hangs,
// so once the 1 MiB spool is full it stays full; of 100 writers of 500
// rows each (about 16 MB of canal-json) most then wait, and the live heap
// must not have grown by their encoded rows (before, it grew by all of
// them). Once the bucket answers, every batch is acked.
func TestWritersWaitingForRoomHoldNoEncodedRows(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	s3 := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			<-gate
		}
		s3.ServeHTTP(w, r)
	}))
	defer srv.Close()
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s := open(t, "s3://cdc/wait?endpoint="+srv.URL+"&use_path_style=true&disable_https=true&region=us-east-1&flush-interval=10m&max-flush-delay=0s&spool-max-bytes=1MiB")

	const writers, rows = 100, 500
	g := newGen(t, gen.Config{Tables: writers, Keys: rows, Rate: float64(rows * writers)})
	batches := make([][]source.Event, 0, writers)
	for _, table := range g.TableNames() {
		r, err := g.Open(model.Span{Table: table}, model.TsFromMillis(start))
		if err != nil {
			t.Fatal(err)
		}
		evs := sourcetest.Read(t, r, model.TsFromMillis(start+10_000), rows)
		if len(evs) < rows {
			t.Fatalf("%s: %d rows", table, len(evs))
		}
		batches = append(batches, evs)
	}
	acked := make(chan error, writers)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	errs := make(chan error, writers)
	for i, table := range g.TableNames() {
		go func() {
			b := &sink.Batch{Dispatcher: table + "-p1.1", Epoch: 1, Events: batches[i], OnFlushed: func(err error) { acked <- err }}
			errs <- s.Write(context.Background(), b)
		}()
	}
	// Settled: every writer is either admitted (returned) or waiting.
	returned := 0
	for deadline := time.Now().Add(time.Minute); returned+s.Waiting() < writers; {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			returned++
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes returned and %d wait for room; want all %d settled", returned, s.Waiting(), writers)
		}
	}
	waiting := s.Waiting()
	if waiting < writers/2 {
		t.Fatalf("only %d of %d writers wait for room in a full 1 MiB spool", waiting, writers)
	}
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	grown := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	// The spool holds 1 MiB (and a write beyond it); waiting costs a few
	// KB per writer. Their encoded rows would be over 150 KB each.
	if grown > 4<<20 {
		t.Fatalf("the live heap grew by %.1f MiB while %d writers waited for room; they hold their encoded rows", float64(grown)/(1<<20), waiting)
	}
	t.Logf("live heap grew by %.2f MiB while %d writers of %d rows waited", float64(grown)/(1<<20), waiting, rows)

	opened = true
	close(gate)
	for ; returned < writers; returned++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, table := range g.TableNames() {
		if err := s.Flush(ctx, table+"-p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < writers; i++ {
		select {
		case err := <-acked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d batches acked", i, writers)
		}
	}
}
