package bucket

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A file:// bucket's objects are written whole, through temporary files
// on the bucket's own filesystem: with $TMPDIR on another filesystem (a
// tmpfs here), fileblob's own writer failed every write with "invalid
// cross-device link".
func TestPutWritesFilesOnTheBucketsOwnFilesystem(t *testing.T) {
	root := t.TempDir()
	if shm, err := os.Stat("/dev/shm"); err == nil {
		var a, b syscall.Stat_t
		if syscall.Stat(root, &a) == nil && syscall.Stat("/dev/shm", &b) == nil && a.Dev != b.Dev && shm.IsDir() {
			tmp, err := os.MkdirTemp("/dev/shm", "cdcctl-put-")
			if err == nil {
				t.Cleanup(func() { os.RemoveAll(tmp) })
				t.Setenv("TMPDIR", tmp) // another filesystem than the bucket's
			}
		}
	}
	ctx := context.Background()
	b, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Put(ctx, "db/t1/1/CDC_d_000001.json", [][]byte{[]byte("a\n"), []byte("b\n")}, false); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got, err := b.ReadAll(ctx, "db/t1/1/CDC_d_000001.json"); err != nil || string(got) != "a\nb\n" {
		t.Fatalf("read back %q (%v); want the chunks in order", got, err)
	}
	// ifNotExist keeps what is there.
	if err := b.Put(ctx, "db/t1/meta/schema_1.json", [][]byte{[]byte("first")}, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "db/t1/meta/schema_1.json", [][]byte{[]byte("second")}, true); !errors.Is(err, ErrExists) {
		t.Fatalf("a second put if-not-exist: %v; want ErrExists", err)
	}
	if got, _ := b.ReadAll(ctx, "db/t1/meta/schema_1.json"); string(got) != "first" {
		t.Fatalf("the object was replaced: %q", got)
	}
	// Without it, an object is replaced whole.
	if err := b.Put(ctx, "db/t1/1/CDC_d_000001.json", [][]byte{[]byte("c\n")}, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.ReadAll(ctx, "db/t1/1/CDC_d_000001.json"); string(got) != "c\n" {
		t.Fatalf("replaced object reads %q", got)
	}
	// A key fileblob would escape is refused, not written elsewhere.
	if err := b.Put(ctx, "odd//key", [][]byte{[]byte("x")}, false); err == nil || !strings.Contains(err.Error(), "plain relative path") {
		t.Fatalf("an odd key: %v; want it refused", err)
	}
	// Nothing but the objects: no temporary file left anywhere, no
	// .attrs sidecar.
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, _ error) error {
		if d != nil && !d.IsDir() && (strings.HasSuffix(p, ".tmp") || strings.HasSuffix(p, ".attrs")) {
			t.Errorf("left in the bucket: %s", p)
		}
		return nil
	})
}

func TestPutRefusesAWriteWhoseDeadlinePassed(t *testing.T) {
	root := t.TempDir()
	b, err := Open(context.Background(), "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Put(ctx, "a/b", [][]byte{[]byte("x")}, false); err == nil {
		t.Fatal("a cancelled put wrote")
	}
	if _, err := os.Stat(filepath.Join(root, "a", "b")); !os.IsNotExist(err) {
		t.Fatalf("the object exists after a cancelled put: %v", err)
	}
}

// Walk lists a file:// bucket's objects under a prefix, whole keys, and
// leaves out the writers' temporary directory and old .attrs sidecars.
func TestWalkListsObjectsUnderAPrefix(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	b, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, k := range []string{"gen/t1/1/a.json", "gen/t1/meta/x.index", "gen/t2/1/b.json", "general/c", "metadata"} {
		if err := b.Put(ctx, k, [][]byte{[]byte(k)}, false); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.MkdirAll(filepath.Join(root, TempDir, "00"), 0o755)
	_ = os.WriteFile(filepath.Join(root, TempDir, "00", "stale.tmp"), nil, 0o644)
	_ = os.WriteFile(filepath.Join(root, "gen", "t1", "1", "a.json.attrs"), nil, 0o644)
	for prefix, want := range map[string]string{
		"":        "gen/t1/1/a.json gen/t1/meta/x.index gen/t2/1/b.json general/c metadata",
		"gen/":    "gen/t1/1/a.json gen/t1/meta/x.index gen/t2/1/b.json",
		"gen":     "gen/t1/1/a.json gen/t1/meta/x.index gen/t2/1/b.json general/c",
		"gen/t1/": "gen/t1/1/a.json gen/t1/meta/x.index",
		"nope/":   "",
	} {
		var got []string
		if err := b.Walk(ctx, prefix, func(key string) error { got = append(got, key); return nil }); err != nil {
			t.Fatalf("walk %q: %v", prefix, err)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("walk %q: %q; want %q", prefix, got, want)
		}
	}
}

// A directory a sink is writing to can be opened by another process (a
// verify, a second sink) at any moment. fileblob's accessibility check
// walked the tree, met a temporary file that was renamed away mid-walk
// and answered "bucket does not exist" (a CI run's verify failed so).
func TestABusyDirectoryOpens(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	w, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := w.Put(ctx, "db/t/1/f.json", [][]byte{make([]byte, 64)}, false); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := 0; i < 300; i++ {
		b, err := Open(ctx, "file://"+root)
		if err != nil {
			close(stop)
			t.Fatalf("open %d of a directory being written: %v", i, err)
		}
		b.Close()
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A path that is a file is not a bucket.
	f := filepath.Join(root, "db", "t", "1", "f.json")
	if _, err := Open(ctx, "file://"+f); err == nil {
		t.Fatal("a file opened as a bucket")
	}
}

// A file:// bucket's object is made durable before it is placed under
// its name, and its name after (and the names of directories made for
// it, up to the root), also an object staged in place: the sink's
// checkpoint goes past what it wrote, and a machine that crashed (or
// lost power) before the page cache reached the disk lost the object or
// left it empty under its name. Before 2026-12-07 nothing was synced.
// fsync=false (a scratch directory) syncs nothing; fsync is refused
// with another value, and on an object store.
func TestObjectsAreDurableBeforeTheyCountAsWritten(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	syncs := func() int64 { return b.dir.syncs.Load() }
	// Linux syncs the file system for many writers at once (groupSync):
	// before the object is placed and after. Elsewhere each file and
	// directory is synced on its own.
	want := func(grouped, each int64) int64 {
		if b.dir.group != nil {
			return grouped
		}
		return each
	}
	if err := b.Put(ctx, "db/t1/CDC_1.json", [][]byte{[]byte("a\n")}, false); err != nil {
		t.Fatal(err)
	}
	// The file, then db/t1, db and the root, made for it.
	if n := syncs(); n != want(2, 4) {
		t.Fatalf("a put into new directories waited for %d syncs; want %d", n, want(2, 4))
	}
	if err := b.Put(ctx, "db/t1/CDC_2.json", [][]byte{[]byte("b\n")}, false); err != nil {
		t.Fatal(err)
	}
	if n := syncs(); n != want(4, 6) {
		t.Fatalf("a put into its directory waited for %d syncs; want 2 (the file, its directory)", n-want(2, 4))
	}
	s, err := b.Stage()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append([]byte("c\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, s, "db/t1/CDC_3.json", Options{}); err != nil {
		t.Fatal(err)
	}
	if n := syncs(); n != want(6, 8) {
		t.Fatalf("a staged object's commit waited for %d syncs; want 2", n-want(4, 6))
	}

	scratch, err := Open(ctx, "file://"+t.TempDir()+"?fsync=false")
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	if err := scratch.Put(ctx, "db/t1/CDC_1.json", [][]byte{[]byte("a\n")}, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := scratch.ReadAll(ctx, "db/t1/CDC_1.json"); string(got) != "a\n" || scratch.dir.syncs.Load() != 0 {
		t.Fatalf("with fsync=false: read %q, %d fsyncs", got, scratch.dir.syncs.Load())
	}
	for _, u := range []string{"file://" + t.TempDir() + "?fsync=maybe", "mem://?fsync=true"} {
		if _, err := Open(ctx, u); err == nil || !strings.Contains(err.Error(), "fsync=") {
			t.Fatalf("open %s: %v; want fsync refused, saying why", u, err)
		}
	}
}
