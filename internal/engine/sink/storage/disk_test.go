package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// spoolBytes is what the segment files under spool-dir hold, and how many
// there are.
func spoolBytes(t *testing.T, dir string) (bytes int64, files int) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".seg") {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
				files++
			}
		}
		return nil
	})
	return bytes, files
}

// With spool=disk the rows that wait for their flush are in segment
// files under spool-dir, not in memory; flushed, the bucket holds exactly
// the source, and the segments are gone. Closing the sink removes its
// spool.
func TestTheDiskSpoolHoldsRowsOnDiskUntilTheirFlush(t *testing.T) {
	spoolDir := t.TempDir()
	uri := "file://" + t.TempDir() + "?spool=disk&spool-dir=" + spoolDir + "&flush-interval=10m&max-flush-delay=0s"
	m := newCounts()
	s, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGen(t, gen.Config{Tables: 3, Keys: 50, Rate: 600, Seed: 7})
	upTo := model.TsFromMillis(start + 3000)
	var a acks
	total := 0
	for _, table := range g.TableNames() {
		total += feed(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a)
	}
	held, files := spoolBytes(t, spoolDir)
	if held < int64(total)*100 || files == 0 {
		t.Fatalf("%d rows wait for their flush, and the spool holds %d bytes in %d files; want them on disk", total, held, files)
	}
	if m.mu.Lock(); m.disk != held {
		t.Errorf("the spool's gauge says %d bytes, its files hold %d", m.disk, held)
	}
	m.mu.Unlock()
	if a.ok.Load() != 0 {
		t.Fatalf("%d batches acked before any flush", a.ok.Load())
	}
	for _, table := range g.TableNames() {
		if err := s.Flush(context.Background(), table+"-p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	if held, _ := spoolBytes(t, spoolDir); held != 0 {
		t.Fatalf("every row flushed, and the spool still holds %d bytes", held)
	}
	checkpointAndVerify(t, s, g, uri, upTo, total, &a)
	if m.mu.Lock(); m.disk != 0 {
		t.Errorf("every row flushed, and the spool's gauge says %d bytes", m.disk)
	}
	m.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(spoolDir); len(left) != 0 {
		t.Fatalf("a closed sink left %d entries in spool-dir (%s...)", len(left), left[0].Name())
	}
}

// A full disk spool makes writers wait (backpressure) like the memory
// one: the flusher writes what it holds, and the waiting write goes in.
func TestAFullDiskSpoolMakesWriteWait(t *testing.T) {
	spoolDir := t.TempDir()
	s := open(t, "file://"+t.TempDir()+"?spool=disk&spool-dir="+spoolDir+"&flush-interval=10m&max-flush-delay=0s&spool-max-bytes=1048576")
	g := newGen(t, gen.Config{Tables: 1, Keys: 2000, Rate: 20000})
	r, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	var flushed atomic.Int32
	for i := 0; i < 12; i++ { // about 330 KiB each: four times the spool
		evs := sourcetest.Read(t, r, model.TsFromMillis(start+60_000), 1000)
		done := make(chan error, 1)
		go func() {
			done <- s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: evs, OnFlushed: func(err error) {
				if err == nil {
					flushed.Add(1)
				}
			}})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("write %d waited 30 s: a full disk spool did not make the flusher write", i)
		}
		if held, _ := spoolBytes(t, spoolDir); held > 2<<20 {
			t.Fatalf("the spool's files hold %d bytes; spool-max-bytes is 1 MiB", held)
		}
	}
	if flushed.Load() == 0 {
		t.Fatal("four spools' worth of rows went in and nothing was flushed")
	}
}

// A spool left by a sink that died (no process holds its lock) is
// removed by the next sink opening spool-dir; one in use is not.
func TestADeadSinksSpoolIsRemoved(t *testing.T) {
	spoolDir := t.TempDir()
	dead := filepath.Join(spoolDir, "cdcctl-spool-dead")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dead, "lock"), nil, 0o600)
	_ = os.WriteFile(filepath.Join(dead, "00000001.seg"), make([]byte, 4096), 0o600)
	alive := filepath.Join(spoolDir, "cdcctl-spool-alive")
	_ = os.MkdirAll(alive, 0o700)
	lock, err := os.Create(filepath.Join(alive, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	open(t, "file://"+t.TempDir()+"?spool=disk&spool-dir="+spoolDir)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead sink's spool is still there (%v)", err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Fatalf("the spool of a sink still open was removed: %v", err)
	}
	// A spool-dir that cannot be made is refused at open with the fix.
	_, err = storageOpen("file://" + t.TempDir() + "?spool=disk&spool-dir=/proc/cdcctl-spool")
	if err == nil || !strings.Contains(err.Error(), "spool-dir") {
		t.Fatalf("an unusable spool-dir: %v; want an error naming spool-dir", err)
	}
}
