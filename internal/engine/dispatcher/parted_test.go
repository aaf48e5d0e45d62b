package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// swappedLog counts the reads of a log, which can be swapped for
// another (the reader started again on another node, its log anew).
type swappedLog struct {
	mu    sync.Mutex
	log   *eventlog.Log
	reads atomic.Int64
}

func (c *swappedLog) local() eventlog.Local {
	c.mu.Lock()
	defer c.mu.Unlock()
	return eventlog.Local{Log: c.log}
}

func (c *swappedLog) Read(ctx context.Context, cf model.ChangefeedID, span model.Span, from source.Cursor, upTo model.Ts, max int) ([]source.Event, source.Cursor, error) {
	c.reads.Add(1)
	return c.local().Read(ctx, cf, span, from, upTo, max)
}

func (c *swappedLog) DDLs(ctx context.Context, cf model.ChangefeedID, table string, from, upTo model.Ts) ([]source.Event, error) {
	return c.local().DDLs(ctx, cf, table, from, upTo)
}

// A stop asked inside a transaction that the log no longer has (its
// reader started again elsewhere, and reads it again into a new log)
// waits for it as a quiet partition waits: backing off between reads. It
// read without a pause, hundreds of thousands of reads a second (over
// the transport where the log is another node's), until the transaction
// was there again.
func TestAStopWaitingForTheRestOfATransactionDoesNotSpin(t *testing.T) {
	const rows, ts = 2000, model.Ts(1000)
	def := &source.TableDef{Schema: "public", Name: "t", Columns: []source.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	fill := func(log *eventlog.Log) {
		var part []source.Event
		for i := 1; i <= rows; i++ {
			key, _ := model.EncodeKeyValues("int8", []string{fmt.Sprint(i)})
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
	}
	open := func() *eventlog.Log {
		log, err := eventlog.Open(t.TempDir(), 0, eventlog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		return log
	}
	first := open()
	fill(first)
	logs := &swappedLog{log: first}
	src := source.NewLogSource(source.Env{Changefeed: "cf", Logs: logs}, []string{"public.t"}, 0)
	s := openSink(t, "file://"+t.TempDir()+"?flush-interval=10ms")
	fw := &firstWrite{Sink: s, wrote: make(chan struct{})}
	d, err := dispatcher.New(dispatcher.Config{ID: "p1.1", Span: model.Span{Table: "public.t", Key: "int8"}, Source: src, Sink: fw,
		Now: func() model.Ts { return ts + 10 }, BatchSize: 64, Idle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	<-fw.wrote
	// The reader starts again elsewhere: its new log is empty yet.
	second := open()
	logs.mu.Lock()
	logs.log = second
	logs.mu.Unlock()
	stopped := make(chan model.Ts, 1)
	go func() {
		final, err := d.Stop(context.Background())
		if err != nil {
			t.Error(err)
		}
		stopped <- final
	}()
	time.Sleep(100 * time.Millisecond)
	before := logs.reads.Load()
	time.Sleep(500 * time.Millisecond)
	reads := logs.reads.Load() - before
	fill(second) // read again: the stop goes on to the transaction's end
	if final := <-stopped; final < ts {
		t.Fatalf("stopped at %s, inside the transaction at %s", final, ts)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if reads > 200 {
		t.Fatalf("waiting inside the transaction, the stopping dispatcher read the log %d times in 500 ms", reads)
	}
}
