package storage_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition placed again on the same node while its earlier dispatcher
// still flushes there (a stop that gave up after 30 s on a slow bucket,
// and a move reverted back to this node): the new owner's resume waits
// for that flush to end before it reads how far the partition's rows
// reach. It read the progress object's intent with the flush's data file
// still on the wire, resumed before the flush, and the flush then landed
// and was acknowledged: its rows were written twice, in an exactly-once
// changefeed, without a crash.
func TestAResumeWaitsForTheFlushOfTheOwnerItSupersedes(t *testing.T) {
	var hold atomic.Bool
	release := make(chan struct{})
	s3 := buckettest.StartObserved(t, func(r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "CDC_p1.1_") && hold.Load() {
			<-release
		}
	})
	uri := s3.URI("superseded", "flush-interval=10m&max-flush-delay=0s&delivery=exactly-once")
	ctx := context.Background()
	s, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Resume(ctx, sink.Writer{Dispatcher: "p1.1", Partition: "p1", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	acked := make(chan error, 1)
	b := &sink.Batch{Dispatcher: "p1.1", Epoch: 1, End: sink.Position{Ts: 500}, OnFlushed: func(err error) { acked <- err },
		Events: []row.Event{{Kind: row.KindDML, Table: "shop.orders", CommitTs: 500, Def: def, Op: row.OpInsert, Key: "1", New: []row.Value{row.Text("1")}}}}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx, "p1.1") }()
	time.Sleep(300 * time.Millisecond) // the flush's data file is on the wire
	s.Forget("p1.1")                   // its stop cut short: the manager forgets it
	resumed := make(chan sink.Position, 1)
	go func() {
		at, _, err := s.Resume(ctx, sink.Writer{Dispatcher: "p1.2", Partition: "p1", Epoch: 2})
		if err != nil {
			t.Error(err)
		}
		resumed <- at
	}()
	time.Sleep(300 * time.Millisecond)
	close(release) // the upload lands
	if err := <-acked; err != nil {
		t.Fatalf("the earlier owner's rows, which landed, were acknowledged with %v", err)
	}
	<-flushed // it may say the partition resumed under another
	// Nothing the earlier owner writes now reaches the bucket.
	if err := s.Write(ctx, &sink.Batch{Dispatcher: "p1.1", Epoch: 1, End: sink.Position{Ts: 600}, OnFlushed: func(error) {},
		Events: []row.Event{{Kind: row.KindDML, Table: "shop.orders", CommitTs: 600, Def: def, Op: row.OpInsert, Key: "2", New: []row.Value{row.Text("2")}}}}); err == nil {
		t.Fatal("the superseded dispatcher's write was accepted")
	}
	if at := <-resumed; at.Ts != model.Ts(500) {
		t.Fatalf("the new owner resumed at %d, before the flush of its predecessor that landed (500): its rows are written twice", at.Ts)
	}
}
