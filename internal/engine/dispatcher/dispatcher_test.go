package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/sinktest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

func now() model.Ts { return model.TsFromTime(time.Now()) }

// live is a generator that started just now, so reading it is live load.
var live = sinktest.Live

type running struct {
	d    *dispatcher.Dispatcher
	done chan error
	stop context.CancelFunc
}

func start(t *testing.T, g *gen.Generator, s sink.Sink, id string, span model.Span, from model.Ts) *running {
	t.Helper()
	d, err := dispatcher.New(dispatcher.Config{ID: id, Span: span, Start: from, Source: g, Sink: s, Now: now, BatchSize: 64, Idle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, done: make(chan error, 1), stop: cancel}
	go func() { r.done <- d.Run(ctx) }()
	return r
}

func openSink(t *testing.T, uri string) *storage.Sink {
	t.Helper()
	s, err := storage.Open(context.Background(), uri, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func spans(g *gen.Generator, table string, n int) []model.Span {
	b := g.KeyBoundaries(n)
	return model.SplitEvenly(table, n, func(i int) string { return b[i-1] })
}

// Under load, with DDLs, half the partitions are handed to new dispatchers
// by graceful stops: nothing is lost and nothing is written twice.
func TestGracefulHandOverIsExactlyOnce(t *testing.T) {
	g := live(t, "gen://?tables=1&keys=400&rate=4000&ddl_every=300ms")
	dir := t.TempDir()
	uri := "file://" + dir + "?flush-interval=30ms&file-size=8192"
	s := openSink(t, uri)
	var all []*running
	var firsts []*running
	for i, sp := range spans(g, "t0001", 4) {
		r := start(t, g, s, fmt.Sprintf("p%d.1", i), sp, g.TableVersion(0))
		firsts = append(firsts, r)
		all = append(all, r)
	}
	time.Sleep(700 * time.Millisecond)
	for i := 0; i < 2; i++ {
		final, err := firsts[i].d.Stop(context.Background())
		if err != nil {
			t.Fatalf("graceful stop of %s: %v", firsts[i].d.ID(), err)
		}
		if err := <-firsts[i].done; err != nil {
			t.Fatal(err)
		}
		all = append(all, start(t, g, s, fmt.Sprintf("p%d.2", i), firsts[i].d.Span(), final))
	}
	time.Sleep(700 * time.Millisecond)
	upTo := stopAll(t, all[2:])
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected < 2000 {
		t.Fatalf("after graceful hand-overs: %+v", rep)
	}
	// The run crossed DDLs: one schema file and one directory per version.
	schemas, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "meta", "schema_*.json"))
	if len(schemas) < 3 {
		t.Fatalf("only %d schema versions written; the DDL path was not exercised", len(schemas))
	}
	t.Logf("verified %d events up to %v: %d lost, %d duplicates", rep.Expected, upTo, rep.Lost, rep.Duplicates)
}

// A dispatcher that dies without flushing is replaced from its last
// checkpoint: nothing is lost; replayed rows are counted as duplicates.
func TestCrashResumesFromTheCheckpointWithoutLoss(t *testing.T) {
	g := live(t, "gen://?tables=1&keys=200&rate=3000")
	uri := "file://" + t.TempDir() + "?flush-interval=40ms"
	s := openSink(t, uri)
	sp := spans(g, "t0001", 2)
	other := start(t, g, s, "p1.1", sp[1], g.TableVersion(0))
	victim := start(t, g, s, "p0.1", sp[0], g.TableVersion(0))
	time.Sleep(500 * time.Millisecond)
	victim.stop() // crash: no final flush
	if err := <-victim.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("crashed dispatcher returned %v", err)
	}
	cp := victim.d.Checkpoint()
	if cp <= g.TableVersion(0) {
		t.Fatal("the checkpoint never advanced")
	}
	heir := start(t, g, s, "p0.2", sp[0], cp)
	time.Sleep(400 * time.Millisecond)
	upTo := stopAll(t, []*running{other, heir})
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("after a crash: %+v", rep)
	}
	t.Logf("verified %d events: %d lost, %d duplicates (at-least-once)", rep.Expected, rep.Lost, rep.Duplicates)
}

// stopAll stops dispatchers gracefully and returns the position up to
// which all of them are durable.
func stopAll(t *testing.T, rs []*running) model.Ts {
	t.Helper()
	var upTo model.Ts
	for i, r := range rs {
		final, err := r.d.Stop(context.Background())
		if err != nil {
			t.Fatalf("stop %s: %v", r.d.ID(), err)
		}
		if err := <-r.done; err != nil {
			t.Fatal(err)
		}
		if i == 0 || final < upTo {
			upTo = final
		}
	}
	return upTo
}

// failingSink accepts writes and then reports every flush as failed, the
// way a sink whose bucket went away does.
type failingSink struct {
	mu      sync.Mutex
	written int
}

func (f *failingSink) Write(_ context.Context, b *sink.Batch) error {
	f.mu.Lock()
	f.written += len(b.Events)
	f.mu.Unlock()
	go b.OnFlushed(errors.New("bucket gone"))
	return nil
}
func (f *failingSink) Flush(context.Context, string) error             { return errors.New("bucket gone") }
func (f *failingSink) WriteDDL(context.Context, source.Event) error    { return nil }
func (f *failingSink) WriteCheckpoint(context.Context, model.Ts) error { return nil }
func (f *failingSink) Close() error                                    { return nil }

func TestAFailingSinkStopsTheDispatcherAndHoldsTheCheckpoint(t *testing.T) {
	g := live(t, "gen://?tables=1&keys=50&rate=2000")
	time.Sleep(50 * time.Millisecond)
	from := g.TableVersion(0)
	r := start(t, g, &failingSink{}, "p0.1", model.Span{Table: "t0001"}, from)
	select {
	case err := <-r.done:
		if err == nil || !strings.Contains(err.Error(), "bucket gone") || r.d.Checkpoint() != from {
			t.Fatalf("Run returned %v with checkpoint %v (started at %v)", err, r.d.Checkpoint(), from)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatcher kept running on a failing sink")
	}
}

// countingSource counts the reads of its readers; its readers keep the
// generator's lookahead.
type countingSource struct {
	*gen.Generator
	mu    sync.Mutex
	reads int
}

type countingReader struct {
	source.Reader
	s *countingSource
}

func (c *countingSource) Open(span model.Span, from model.Ts) (source.Reader, error) {
	r, err := c.Generator.Open(span, from)
	if err != nil {
		return nil, err
	}
	return &countingReader{Reader: r, s: c}, nil
}

func (r *countingReader) Read(ctx context.Context, upTo model.Ts, max int) ([]source.Event, error) {
	r.s.mu.Lock()
	r.s.reads++
	r.s.mu.Unlock()
	return r.Reader.Read(ctx, upTo, max)
}

func (r *countingReader) NextAt() (model.Ts, bool) { return r.Reader.(source.Lookahead).NextAt() }

// A quiet partition sleeps until its next event instead of polling, while
// its checkpoint keeps moving with the clock; everything still arrives
// exactly once.
func TestAQuietPartitionSleepsUntilItsNextEvent(t *testing.T) {
	g := live(t, "gen://?tables=1&keys=4&rate=4&ddl_every=700ms")
	src := &countingSource{Generator: g}
	uri := "file://" + t.TempDir() + "?flush-interval=20ms"
	s := openSink(t, uri)
	d, err := dispatcher.New(dispatcher.Config{ID: "p0.1", Span: model.Span{Table: "t0001"}, Start: g.TableVersion(0), Source: src, Sink: s, Now: now, Idle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	time.Sleep(2 * time.Second)
	// About 8 events and 2 DDLs in 2s. Polling every 1ms (backing off to
	// 8ms) reads 250 times or more; sleeping until the next commit reads
	// two to four times per event or DDL.
	src.mu.Lock()
	reads := src.reads
	src.mu.Unlock()
	// The checkpoint passed the last commit before now, though nothing was
	// written since: the stretch after it is known empty.
	before := now()
	var last model.Ts
	for k := range 4 {
		if n := g.CountIndex(0, k, before); n > 0 {
			last = max(last, g.CommitTs(0, k, n))
		}
	}
	cp := d.Checkpoint()
	final, err := d.Stop(context.Background())
	if err != nil || <-done != nil {
		t.Fatalf("stop: %v", err)
	}
	if reads > 100 {
		t.Fatalf("%d reads in 2s of a source with about 10 commits: the dispatcher polled", reads)
	}
	if cp < last || final < cp {
		t.Fatalf("checkpoint %v (final %v) behind the last commit %v", cp, final, last)
	}
	rep, err := verify.Storage(context.Background(), g, uri, final)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected == 0 {
		t.Fatalf("quiet partition: %+v", rep)
	}
	t.Logf("%d reads, %d events verified up to %v", reads, rep.Expected, final)
}

// flakySource's readers fail their first reads, as a read of an event
// log on an unreachable node does.
type flakySource struct {
	*gen.Generator
	mu    sync.Mutex
	fails int // reads left to fail, across its readers
}

type flakyReader struct {
	source.Reader
	s *flakySource
}

func (f *flakySource) Open(span model.Span, from model.Ts) (source.Reader, error) {
	r, err := f.Generator.Open(span, from)
	if err != nil {
		return nil, err
	}
	return &flakyReader{Reader: r, s: f}, nil
}

func (r *flakyReader) Read(ctx context.Context, upTo model.Ts, max int) ([]source.Event, error) {
	r.s.mu.Lock()
	fail := r.s.fails > 0
	if fail {
		r.s.fails--
	}
	r.s.mu.Unlock()
	if fail {
		return nil, errors.New("injected: the event log's node does not answer")
	}
	return r.Reader.Read(ctx, upTo, max)
}

// A read that fails reads nothing and keeps the position: the dispatcher
// reads again, warns about it at most every few seconds, and loses and
// repeats nothing.
func TestAFailedReadIsReadAgainWithoutLoss(t *testing.T) {
	g := live(t, "gen://?tables=1&keys=100&rate=2000")
	src := &flakySource{Generator: g, fails: 10}
	uri := "file://" + t.TempDir() + "?flush-interval=40ms"
	s := openSink(t, uri)
	var logged strings.Builder
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logged.Write(p)
	}), nil))
	d, err := dispatcher.New(dispatcher.Config{ID: "p0.1", Span: model.Span{Table: "t0001"}, Start: g.TableVersion(0), Source: src, Sink: s, Now: now,
		BatchSize: 64, Idle: 5 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	time.Sleep(time.Second)
	final, err := d.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	left := src.fails
	src.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d injected failures were never met", left)
	}
	rep, err := verify.Storage(context.Background(), g, uri, final)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected == 0 {
		t.Fatalf("after 10 failed reads: %+v", rep)
	}
	logMu.Lock()
	warnings := strings.Count(logged.String(), "cannot read the event log; will retry")
	logMu.Unlock()
	if warnings < 1 || warnings > 2 {
		t.Fatalf("%d warnings for 10 failed reads in a second; want 1 (at most one every few seconds)", warnings)
	}
	t.Logf("verified %d events after 10 failed reads: 0 lost, 0 duplicates, %d warning", rep.Expected, warnings)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
