package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// firstWrite signals the first batch written, and slows every write so
// that a stop asked then finds the dispatcher inside the transaction.
type firstWrite struct {
	sink.Sink
	once  sync.Once
	wrote chan struct{}
}

func (f *firstWrite) Write(ctx context.Context, b *sink.Batch) error {
	f.once.Do(func() { close(f.wrote) })
	time.Sleep(2 * time.Millisecond)
	return f.Sink.Write(ctx, b)
}

// A transaction larger than a batch is read in parts. A graceful stop
// asked in the middle of it waits for its end: the position handed to the
// next owner is after the whole transaction, and no row is written twice.
func TestAStopInsideALargeTransactionWaitsForItsEnd(t *testing.T) {
	const rows, ts = 2000, model.Ts(1000)
	log, err := eventlog.Open(t.TempDir(), 0, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	def := &source.TableDef{Schema: "public", Name: "t", Columns: []source.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	var part []source.Event
	for i := 1; i <= rows; i++ {
		key, err := model.EncodeKeyValues("int8", []string{fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		part = append(part, source.Event{Kind: source.KindDML, Table: "public.t", CommitTs: ts, Def: def, Op: source.OpInsert, Key: key, New: []source.Value{source.Text(fmt.Sprint(i))}})
		if len(part) == 300 {
			if err := log.AppendPart(part); err != nil {
				t.Fatal(err)
			}
			part = nil
		}
	}
	if err := log.Append(part); err != nil {
		t.Fatal(err)
	}
	log.Resolve(ts + 10)
	src := source.NewLogSource(source.Env{Changefeed: "cf", Logs: eventlog.Local{Log: log}}, []string{"public.t"}, 0)

	uri := "file://" + t.TempDir() + "?flush-interval=10ms"
	s := openSink(t, uri)
	fw := &firstWrite{Sink: s, wrote: make(chan struct{})}
	span := model.Span{Table: "public.t", Key: "int8"}
	d, err := dispatcher.New(dispatcher.Config{ID: "p1.1", Span: span, Start: 0, Source: src, Sink: fw,
		Now: func() model.Ts { return ts + 10 }, BatchSize: 64, Idle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	<-fw.wrote
	final, err := d.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if final < ts {
		t.Fatalf("stopped at %v inside the transaction at %v: the next owner would write its first rows again", final, ts)
	}

	cfg, err := storage.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := storage.OpenBucket(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	streams, err := storage.ScanChanges(context.Background(), bucket, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, st := range streams {
		for _, c := range st.Changes {
			seen[c.Key()]++
		}
	}
	for i := 1; i <= rows; i++ {
		if n := seen[fmt.Sprint(i)]; n != 1 {
			t.Fatalf("row %d is in the sink %d times (of %d rows, %d distinct seen)", i, n, rows, len(seen))
		}
	}
}
