package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// stagedBytes is what the temporary files of a file:// bucket hold, and
// how many there are.
func stagedBytes(t *testing.T, root string) (bytes int64, files int) {
	t.Helper()
	_ = filepath.WalkDir(filepath.Join(root, bucket.TempDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".lock") { // the process's lock
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
				files++
			}
		}
		return nil
	})
	return bytes, files
}

// visible lists the objects a reader of the bucket sees.
func visible(t *testing.T, uri string) []string {
	t.Helper()
	b, err := bucket.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var keys []string
	if err := b.Walk(context.Background(), "", func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// visibleDataFiles lists the data files a reader of the bucket sees.
func visibleDataFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, k := range visible(t, "file://"+root) {
		if strings.HasSuffix(k, ".json") && !strings.Contains(k, "/meta/") {
			files = append(files, k)
		}
	}
	return files
}

// checkpointAndVerify writes the checkpoint upTo and proves that the
// bucket holds the source's total rows up to it, each once and in order,
// and that no batch failed.
func checkpointAndVerify(t *testing.T, s *storage.Sink, g *gen.Generator, uri string, upTo model.Ts, total int, a *acks) {
	t.Helper()
	if err := s.WriteCheckpoint(context.Background(), upTo); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Events != uint64(total) || a.failed.Load() != 0 {
		t.Fatalf("verify: %+v (wrote %d, %d failed acks)", rep, total, a.failed.Load())
	}
}

// With spool=bucket the rows that wait for their flush are in the
// temporary files of the data files they will be, which no reader sees;
// the flush renames them into place and the bucket holds exactly the
// source. Rows not flushed when the sink closes leave nothing behind.
func TestTheBucketSpoolWritesRowsIntoTheirFilesAtOnce(t *testing.T) {
	root := t.TempDir()
	uri := "file://" + root + "?spool=bucket&flush-interval=10m&max-flush-delay=0s"
	s := open(t, uri)
	g := newGen(t, gen.Config{Tables: 3, Keys: 50, Rate: 600, Seed: 7})
	upTo := model.TsFromMillis(start + 3000)
	var a acks
	total := 0
	for _, table := range g.TableNames() {
		total += feed(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a)
	}
	held, files := stagedBytes(t, root)
	if held < int64(total)*100 || files != 3 {
		t.Fatalf("%d rows of 3 tables wait for their flush, and %d temporary files hold %d bytes; want 3 holding them", total, files, held)
	}
	if keys := visible(t, "file://"+root); len(keys) != 0 {
		t.Fatalf("before any flush a reader sees %v; want nothing", keys)
	}
	if a.ok.Load() != 0 {
		t.Fatalf("%d batches acked before any flush", a.ok.Load())
	}
	for _, table := range g.TableNames() {
		if err := s.Flush(context.Background(), table+"-p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	if held, files := stagedBytes(t, root); files != 0 {
		t.Fatalf("every row flushed, and %d temporary files hold %d bytes", files, held)
	}
	checkpointAndVerify(t, s, g, uri, upTo, total, &a)

	// Rows written and not flushed: the close fails their batches and
	// removes their files.
	var b acks
	feed(t, s, g, model.Span{Table: g.TableNames()[0]}, "again-p1.2", upTo, &b)
	if _, files := stagedBytes(t, root); files != 1 {
		t.Fatalf("%d temporary files for one dispatcher's rows; want 1", files)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if held, files := stagedBytes(t, root); files != 0 {
		t.Fatalf("a closed sink left %d temporary files (%d bytes)", files, held)
	}
	if b.ok.Load() != 0 || b.failed.Load() == 0 {
		t.Fatalf("batches unflushed at the close: %d acked, %d failed; want all failed", b.ok.Load(), b.failed.Load())
	}
}

// Tables written at once, in small batches, while flushes take their
// files all the time (a small file size, a short delay): a flush takes
// only what a write has finished appending, so every row is in its
// table's files once and in order, every batch is acked, and no
// temporary file is left.
func TestTheBucketSpoolUnderConcurrentWritesAndFlushes(t *testing.T) {
	root := t.TempDir()
	uri := "file://" + root + "?spool=bucket&file-size=16384&flush-interval=50ms&max-flush-delay=2ms"
	s := open(t, uri)
	const tables = 6
	g := newGen(t, gen.Config{Tables: tables, Keys: 40, Rate: 3000, Seed: 5})
	upTo := model.TsFromMillis(start + 2000)
	var a acks
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for _, table := range g.TableNames() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.Open(model.Span{Table: table}, model.TsFromMillis(start))
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for {
				evs := sourcetest.Read(t, r, upTo, 7)
				if len(evs) == 0 {
					break
				}
				n += len(evs)
				err := s.Write(context.Background(), &sink.Batch{Dispatcher: table + "-p1.1", Epoch: 1, Events: evs, OnFlushed: func(err error) {
					if err != nil {
						a.failed.Add(1)
					} else {
						a.ok.Add(1)
					}
				}})
				if err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.Flush(context.Background(), table+"-p1.1"); err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkpointAndVerify(t, s, g, uri, upTo, total, &a)
	if held, files := stagedBytes(t, root); files != 0 {
		t.Fatalf("every row flushed, and %d temporary files hold %d bytes", files, held)
	}
	// How many files a table ends in depends on how far its writes ran
	// ahead of its flushes; more than one for some table is what shows
	// that files were cut while their table was written.
	if files := visibleDataFiles(t, root); len(files) <= tables {
		t.Fatalf("%d data files of %d tables; want the small file size to have cut some table's into several", len(files), tables)
	}
}

// A flush whose file cannot be placed fails its batches and fences its
// dispatcher as with any bucket, and leaves no temporary file behind.
func TestABucketSpoolFlushThatFailsLeavesNoTemporaryFile(t *testing.T) {
	root := t.TempDir()
	uri := "file://" + root + "?spool=bucket&flush-interval=10m&max-flush-delay=0s&retry-timeout=0s"
	s := open(t, uri)
	g := newGen(t, gen.Config{Tables: 1, Keys: 20, Rate: 400, Seed: 9})
	span := model.Span{Table: g.TableNames()[0]}
	r, err := g.Open(span, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.Read(t, r, model.TsFromMillis(start+2000), 1<<20)
	write := func(from, to int) (chan error, error) {
		acked := make(chan error, 1)
		return acked, s.Write(context.Background(), &sink.Batch{Dispatcher: "t-p1.1", Epoch: 1, Events: evs[from:to], OnFlushed: func(err error) { acked <- err }})
	}
	first, err := write(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background(), "t-p1.1"); err != nil || <-first != nil {
		t.Fatalf("first flush: %v", err)
	}
	// The table's directory becomes a file: the next file cannot go there.
	files := visibleDataFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no data file after the first flush")
	}
	dataDir := filepath.Join(root, filepath.Dir(filepath.FromSlash(files[0])))
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dataDir, []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := write(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	if _, files := stagedBytes(t, root); files != 1 {
		t.Fatalf("%d temporary files hold the second batch; want 1", files)
	}
	if err := s.Flush(context.Background(), "t-p1.1"); err == nil {
		t.Fatal("a flush into a directory that is a file succeeded")
	}
	if err := <-second; err == nil {
		t.Fatal("the batch of the failed flush was acked")
	}
	if held, files := stagedBytes(t, root); files != 0 {
		t.Fatalf("the failed flush left %d temporary files (%d bytes)", files, held)
	}
	if _, err := write(200, 300); err == nil || !strings.Contains(err.Error(), "resumes from its checkpoint") {
		t.Fatalf("a write after the failed flush: %v; want it refused", err)
	}
}

// spool=bucket needs a file:// bucket.
func TestTheBucketSpoolIsOnlyForFileBuckets(t *testing.T) {
	_, err := storage.ParseURI("s3://b/p?spool=bucket")
	if err == nil || !strings.Contains(err.Error(), "only a file:// bucket") {
		t.Fatalf("spool=bucket on s3: %v; want it refused, naming file://", err)
	}
	cfg, err := storage.ParseURI("file:///tmp/x?spool=bucket")
	if err != nil || cfg.Spool != storage.SpoolBucket {
		t.Fatalf("spool=bucket on file://: %+v, %v", cfg, err)
	}
}
