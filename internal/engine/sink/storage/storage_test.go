package storage_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

const start = int64(1_800_000_000_000)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newGen(t testing.TB, cfg gen.Config) *gen.Generator {
	t.Helper()
	cfg.StartMillis = start
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func open(t *testing.T, uri string) *storage.Sink {
	t.Helper()
	s, err := storage.Open(context.Background(), uri, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// feed writes one partition's events up to upTo through the sink as one
// dispatcher would, in batches, and returns a counter of flush acks.
type acks struct {
	ok, failed atomic.Int64
}

func feed(t *testing.T, s sink.Sink, g *gen.Generator, span model.Span, dispatcher string, upTo model.Ts, a *acks) int {
	t.Helper()
	return feedFlushing(t, s, g, span, dispatcher, upTo, a, 0)
}

// feedFlushing is feed with a flush after every `every` batches (0:
// none), so that file rotation does not depend on the flusher's timing.
func feedFlushing(t *testing.T, s sink.Sink, g *gen.Generator, span model.Span, dispatcher string, upTo model.Ts, a *acks, every int) int {
	t.Helper()
	n, err := feedUntilError(t, s, g, span, dispatcher, upTo, a, every)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// feedUntilError is feedFlushing that returns the sink's first error
// (a write after a failed flush, or a flush), for tests of failures.
func feedUntilError(t *testing.T, s sink.Sink, g *gen.Generator, span model.Span, dispatcher string, upTo model.Ts, a *acks, every int) (int, error) {
	t.Helper()
	r, err := g.Open(span, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	n, batches := 0, 0
	for {
		evs := sourcetest.Read(t, r, upTo, 25)
		if len(evs) == 0 {
			return n, nil
		}
		n += len(evs)
		err := s.Write(context.Background(), &sink.Batch{Dispatcher: dispatcher, Epoch: 1, Events: evs, OnFlushed: func(err error) {
			if err != nil {
				a.failed.Add(1)
			} else {
				a.ok.Add(1)
			}
		}})
		if err != nil {
			return n, err
		}
		if batches++; every > 0 && batches%every == 0 {
			if err := s.Flush(context.Background(), dispatcher); err != nil {
				return n, err
			}
		}
	}
}

func TestStorageSinkHoldsExactlyTheSource(t *testing.T) {
	for _, protocol := range []string{"canal-json", "csv"} {
		t.Run(protocol, func(t *testing.T) {
			dir := t.TempDir()
			uri := "file://" + dir + "?protocol=" + protocol + "&file-size=4096&flush-interval=50ms"
			s := open(t, uri)
			g := newGen(t, gen.Config{Tables: 2, Keys: 60, Rate: 600, Seed: 4})
			upTo := model.TsFromMillis(start + 3000)
			var a acks
			total := 0
			dispatchers := []string{}
			for _, table := range g.TableNames() {
				b := g.KeyBoundaries(2)
				for i, sp := range model.SplitEvenly(table, 2, func(i int) string { return b[i-1] }) {
					d := table + "-p" + string(rune('0'+i)) + "-1"
					dispatchers = append(dispatchers, d)
					// Flushes every 100 events: several files of 4 KiB each.
					total += feedFlushing(t, s, g, sp, d, upTo, &a, 4)
				}
			}
			for _, d := range dispatchers {
				if err := s.Flush(context.Background(), d); err != nil {
					t.Fatal(err)
				}
			}
			if a.failed.Load() != 0 || a.ok.Load() == 0 {
				t.Fatalf("acks: %d ok, %d failed", a.ok.Load(), a.failed.Load())
			}
			rep, err := verify.Storage(context.Background(), g, uri, upTo)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Duplicates != 0 || rep.Events != uint64(total) || rep.Expected != uint64(total) {
				t.Fatalf("verify: %+v (wrote %d)", rep, total)
			}
			// TiCDC's layout: a schema file per table version, data files and
			// an index per dispatcher.
			schemas, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "meta", "schema_*_*.json"))
			datas, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "*", "CDC_t0001-p0-1_*."+map[string]string{"csv": "csv", "canal-json": "json"}[protocol]))
			index, err := os.ReadFile(filepath.Join(filepath.Dir(datas[0]), "meta", "CDC_t0001-p0-1.index"))
			if len(schemas) != 1 || len(datas) < 2 || err != nil || strings.TrimSpace(string(index)) != filepath.Base(datas[len(datas)-1]) {
				t.Fatalf("layout: schemas %v, %d data files, index %q (%v)", schemas, len(datas), index, err)
			}
			// Only the layout's files: no gocloud .attrs sidecar beside each.
			_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error {
				if strings.HasSuffix(p, ".attrs") {
					t.Fatalf("a sidecar file in the sink: %s", p)
				}
				return nil
			})
		})
	}
}

func TestWriteWakesAtOnceButAcksOnlyWhenDurable(t *testing.T) {
	s := open(t, "file://"+t.TempDir()+"?flush-interval=10m&max-flush-delay=0s")
	g := newGen(t, gen.Config{Tables: 1, Keys: 10, Rate: 100})
	r, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	evs := sourcetest.Read(t, r, model.TsFromMillis(start+2000), 1000)
	flushed := make(chan error, 1)
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: evs, OnFlushed: func(err error) { flushed <- err }}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-flushed:
		t.Fatal("flush-acked before anything was written (file-size and flush-interval not reached)")
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.Flush(context.Background(), "d1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("Flush returned before the batch was acked")
	}
}

func TestFullSpoolMakesWriteWait(t *testing.T) {
	s := open(t, "file://"+t.TempDir()+"?flush-interval=10m&max-flush-delay=0s&spool-max-bytes=1048576")
	g := newGen(t, gen.Config{Tables: 1, Keys: 2000, Rate: 20000})
	r, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	// About 0.9 MiB of canal-json rows, then more.
	var first []source.Event
	for size := 0; size < 900<<10; {
		evs := sourcetest.Read(t, r, model.TsFromMillis(start+60_000), 100)
		first = append(first, evs...)
		size += 330 * len(evs)
	}
	var flushed atomic.Bool
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: first, OnFlushed: func(error) { flushed.Store(true) }}); err != nil {
		t.Fatal(err)
	}
	// The next write waits for the spool to be freed, and the flusher
	// frees it at once: no file is full and the interval is ten minutes
	// away, but a writer waits.
	second := sourcetest.Read(t, r, model.TsFromMillis(start+60_000), 2000)
	returned := make(chan error, 1)
	go func() { returned <- s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: second}) }()
	select {
	case err := <-returned:
		if err != nil || !flushed.Load() {
			t.Fatalf("Write past the spool limit returned (%v) before the spool was flushed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write waiting for spool space did not make the flusher write")
	}
	if err := s.Flush(context.Background(), "d1"); err != nil {
		t.Fatal(err)
	}
	// A cancelled context frees a waiting writer too.
	ctx, cancel := context.WithCancel(context.Background())
	third := sourcetest.Read(t, r, model.TsFromMillis(start+60_000), 3000)
	var wg sync.WaitGroup
	wg.Add(1)
	var werr error
	go func() { defer wg.Done(); werr = s.Write(ctx, &sink.Batch{Dispatcher: "d1", Events: third}) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	wg.Wait()
	if werr == nil {
		// It may have fit; then nothing to check.
		return
	}
	if ctx.Err() == nil {
		t.Fatalf("Write failed without cancellation: %v", werr)
	}
}

func TestARecreatedDispatcherNeverOverwritesFiles(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir
	g := newGen(t, gen.Config{Tables: 1, Keys: 10, Rate: 100})
	var a acks
	for round := 0; round < 2; round++ {
		s, err := storage.Open(context.Background(), uri, quiet())
		if err != nil {
			t.Fatal(err)
		}
		feed(t, s, g, model.Span{Table: "t0001"}, "p1-1", model.TsFromMillis(start+1000), &a)
		if err := s.Flush(context.Background(), "p1-1"); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	files, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "*", "CDC_p1-1_*.json"))
	if len(files) != 2 || !strings.HasSuffix(files[0], "_000001.json") || !strings.HasSuffix(files[1], "_000002.json") {
		t.Fatalf("files %v", files)
	}
	// The second round replayed the same rows: verify sees duplicates, not loss.
	rep, err := verify.Storage(context.Background(), g, uri, model.TsFromMillis(start+1000))
	if err != nil || !rep.OK || rep.Duplicates != rep.Expected {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestDDLStartsANewTableVersion(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir + "?flush-interval=20ms"
	s := open(t, uri)
	g := newGen(t, gen.Config{Tables: 1, Keys: 30, Rate: 300, DDLEvery: time.Second})
	upTo := model.TsFromMillis(start + 2500)
	// The DDL barrier: DML before each DDL is flushed, then the DDL is
	// written, then DML after it.
	pos := model.TsFromMillis(start)
	ddls := g.DDLs("t0001", pos, upTo)
	r, _ := g.Open(model.Span{Table: "t0001"}, pos)
	for _, stop := range append(ddls, source.Event{CommitTs: upTo}) {
		for {
			evs := sourcetest.Read(t, r, stop.CommitTs, 50)
			if len(evs) == 0 {
				break
			}
			if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "p1-1", Events: evs}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(context.Background(), "p1-1"); err != nil {
			t.Fatal(err)
		}
		if stop.Kind == source.KindDDL {
			if err := s.WriteDDL(context.Background(), stop); err != nil {
				t.Fatal(err)
			}
		}
	}
	schemas, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "meta", "schema_*.json"))
	versions, _ := filepath.Glob(filepath.Join(dir, "gen", "t0001", "[0-9]*"))
	if len(ddls) != 2 || len(schemas) != 3 || len(versions) != 3 {
		t.Fatalf("%d DDLs, schema files %v, version dirs %v", len(ddls), schemas, versions)
	}
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil || !rep.OK || rep.Duplicates != 0 || rep.Misplaced != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	if err := s.WriteCheckpoint(context.Background(), upTo); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "metadata"))
	if !strings.Contains(string(b), `"checkpoint-ts":`) {
		t.Fatalf("metadata %s", b)
	}
	// The second version's rows in the first version's files, as a
	// writer that did not start a new version at the DDL leaves them: a
	// consumer would read them under the old schema.
	moved := filepath.Join(versions[0], "CDC_p1-2_000001.json")
	if err := os.Rename(filepath.Join(versions[1], "CDC_p1-1_000001.json"), moved); err != nil {
		t.Fatal(err)
	}
	if rep, err := verify.Storage(context.Background(), g, uri, upTo); err != nil || rep.OK || rep.Misplaced == 0 || rep.Lost != 0 {
		t.Fatalf("rows of the second version in the first's files: %+v %v", rep, err)
	}
}

func TestBadSinkURIs(t *testing.T) {
	for uri, mention := range map[string]string{
		"ftp://x/y":                                        "storage sinks take file://",
		"file://relative/dir":                              "absolute path",
		"file:///tmp/x?protocol=avro":                      "unknown protocol",
		"file:///tmp/x?file-size=10":                       "file-size",
		"file:///tmp/x?flush-interval=1ns":                 "flush-interval",
		"file:///tmp/x?flush-interval=often":               "flush-interval",
		"file:///tmp/x?max-flush-delay=-1s":                "max-flush-delay",
		"file:///tmp/x?max-flush-delay=soon":               "max-flush-delay",
		"file:///tmp/x?write-timeout=1ms":                  "write-timeout",
		"file:///tmp/x?state-ttl=1ms":                      "state-ttl",
		"file:///tmp/x?spool=tape":                         "memory (the default), disk or bucket",
		"file:///tmp/x?date-separator=week":                "none (the default), year, month or day",
		"file:///tmp/x?spool=disk&spool-dir=rel":           "absolute directory",
		"file:///tmp/x?spool-dir=/var/spool":               "add spool=disk",
		"file:///tmp/x?max-active-tables=0":                "max-active-tables",
		"file:///tmp/x?max-buffered-bytes=10":              "max-buffered-bytes",
		"file:///tmp/x?transaction-meta=yes":               "use true or false",
		"file:///tmp/x?transaction-meta=true&protocol=csv": "needs protocol=canal-json",
		"file:///tmp/x?fsync=no":                           "fsync",
		"s3://b/prefix?fsync=true":                         "only a file:// sink",
		"s3:///prefix":                                     "name the bucket",
		"gs:///prefix":                                     "name the bucket",
		"azblob:///prefix":                                 "name the container",
	} {
		if _, err := storage.ParseURI(uri); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseURI(%q) = %v, want an error mentioning %q", uri, err, mention)
		}
	}
}

func FuzzDecodeRows(f *testing.F) {
	f.Add([]byte(`{"table":"t0001","data":[{"id":"aaaa","version":"1"}],"_tidb":{"commitTs":5}}`), false)
	f.Add([]byte("\"I\",\"t0001\",\"gen\",\"5\",\"aaaa\",\"1\",\"v\"\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, csv bool) {
		p := codec.ProtocolCanalJSON
		if csv {
			p = codec.ProtocolCSV
		}
		_, _ = codec.DecodeRows(p, data) // must not panic
	})
}

func storageOpen(uri string) (*storage.Sink, error) {
	return storage.Open(context.Background(), uri, quiet())
}
