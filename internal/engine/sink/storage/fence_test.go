package storage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// faultyS3 is gofakes3 whose next data-file PUT, once armed, is held
// until released and then refused (403, which the client does not retry).
type faultyS3 struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
	backend *s3mem.Backend
}

func startFaultyS3(t *testing.T) (*faultyS3, string) {
	t.Helper()
	f := &faultyS3{backend: s3mem.New(), entered: make(chan struct{}), release: make(chan struct{})}
	if err := f.backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	s3 := gofakes3.New(f.backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		hit := f.armed && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/CDC_") && !strings.Contains(r.URL.Path, "/meta/")
		if hit {
			f.armed = false
		}
		f.mu.Unlock()
		if hit {
			close(f.entered)
			<-f.release
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>injected</Message></Error>`))
			return
		}
		s3.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	return f, "s3://cdc/fence?endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
}

func (f *faultyS3) arm() { f.mu.Lock(); f.armed = true; f.mu.Unlock() }

// A dispatcher's files stay a prefix of what it was given. Its flush
// fails while its next batch waits in the spool: that batch is refused
// unwritten (written later, it would put a newer version of a key ahead
// of its successor's replay of the failed rows), and so is every later
// Write. The successor replays from the checkpoint, and verify finds
// every version in order.
func TestAFailedFlushFencesItsDispatcher(t *testing.T) {
	f, uri := startFaultyS3(t)
	s := open(t, uri+"&flush-interval=10m&max-flush-delay=50ms")
	g := newGen(t, gen.Config{Tables: 1, Keys: 4, Rate: 200})
	span := model.Span{Table: g.TableNames()[0]}
	upTo := model.TsFromMillis(start + 3000)
	r, err := g.Open(span, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.Read(t, r, upTo, 1<<20)
	if len(evs) < 500 {
		t.Fatalf("the generator gave %d events; want 500 or more", len(evs))
	}
	write := func(id string, from, to int) (<-chan error, error) {
		acked := make(chan error, 1)
		err := s.Write(context.Background(), &sink.Batch{Dispatcher: id, Epoch: 1, Events: evs[from:min(to, len(evs))], OnFlushed: func(err error) { acked <- err }})
		return acked, err
	}
	wait := func(what string, ch <-chan error) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("%s never acked", what)
			return nil
		}
	}

	// The first batch is durable: the checkpoint stands after it.
	first, err := write("t-p1.1", 0, 100)
	if err != nil || wait("the first batch", first) != nil {
		t.Fatalf("first batch: %v", err)
	}
	// The second batch's file is held by the bucket; the third waits in
	// the spool behind it.
	f.arm()
	second, err := write("t-p1.1", 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	<-f.entered
	third, err := write("t-p1.1", 200, 300)
	if err != nil {
		t.Fatal(err)
	}
	close(f.release)
	if err := wait("the failed batch", second); err == nil {
		t.Fatal("the batch whose file was refused was acked as durable")
	}
	if err := wait("the batch behind the failed one", third); err == nil {
		t.Fatal("the batch behind a failed flush was written: the bucket holds rows the successor replays after newer ones")
	}
	if _, err := write("t-p1.1", 300, 400); err == nil || !strings.Contains(err.Error(), "after its failed flush") {
		t.Fatalf("a write after the failure: %v; want it refused", err)
	}
	if err := s.Flush(context.Background(), "t-p1.1"); err == nil {
		t.Fatal("Flush of the fenced dispatcher reported success")
	}

	// The successor replays from the checkpoint (after the first batch)
	// to the end.
	for from := 100; from < len(evs); from += 100 {
		ch, err := write("t-p1.2", from, from+100)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait("a replayed batch", ch); err != nil {
			t.Fatalf("a replayed batch: %v", err)
		}
	}
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.OutOfOrder != 0 || rep.Lost != 0 {
		t.Fatalf("after the replay: %+v", rep)
	}
}

// A node frozen past its lease wakes with rows still spooled and its
// dispatchers running; its partitions already run elsewhere. Its sink
// asks the member's tenure (a real etcd lease here) before the file, and
// writes nothing: the rows would land after the new owner's.
func TestASinkWritesNothingOnceItsLeaseMayHaveEnded(t *testing.T) {
	_, cli := etcdtest.Start(t)
	m, err := cluster.Join(context.Background(), meta.NewStore(cli, "test"), model.NodeInfo{ID: "capture-1", Address: "capture-1"}, 2*time.Second, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Abandon()
	dir := t.TempDir()
	s, err := storage.OpenWith(context.Background(), "file://"+dir+"?flush-interval=10m&max-flush-delay=10m", quiet(), storage.Env{Tenure: m.Tenure()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGen(t, gen.Config{Tables: 1, Keys: 4, Rate: 200})
	r, err := g.Open(model.Span{Table: g.TableNames()[0]}, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.Read(t, r, model.TsFromMillis(start+2000), 1<<20)
	write := func(from, to int) {
		t.Helper()
		if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "t-p1.1", Epoch: 1, Events: evs[from:to], OnFlushed: func(error) {}}); err != nil {
			t.Fatal(err)
		}
	}
	files := func() int {
		matches, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*", "CDC_*.json"))
		return len(matches)
	}
	write(0, 50)
	if err := s.Flush(context.Background(), "t-p1.1"); err != nil || files() != 1 {
		t.Fatalf("while the lease is held: %v, %d data files", err, files())
	}
	write(50, 100)
	// The lease ends (the cluster gave up on the node) while the process
	// is stopped for longer than the TTL; then it flushes what it held.
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(m.Info().Incarnation)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Flush(ctx, "t-p1.1")
	if err == nil || !strings.Contains(err.Error(), "writes nothing more") {
		t.Fatalf("flush after the lease ended: %v; want it refused by the tenure", err)
	}
	if n := files(); n != 1 {
		t.Fatalf("%d data files after the lease ended; want 1 (the spooled rows not written)", n)
	}
}
