package bucket

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An object written in place is seen by no reader until its commit, and
// then whole, with its note; a discarded one leaves nothing behind, not
// even its temporary file.
func TestAStagedObjectAppearsWholeAtItsCommit(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Stages() {
		t.Fatal("a file:// bucket does not write in place")
	}
	s, err := b.Stage()
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"a\n", "b\n", "c\n"} {
		if err := s.Append([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Size() != 6 {
		t.Fatalf("size %d; want 6", s.Size())
	}
	if keys := walkAll(t, b); len(keys) != 0 {
		t.Fatalf("before the commit a reader sees %v; want nothing", keys)
	}
	const key = "db/t1/1/CDC_d_000001.json"
	note := ""
	if b.KeepsNotes(ctx) {
		note = "progress 7"
	}
	if err := b.Commit(ctx, s, key, Options{Note: note}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(ctx, key); err != nil || string(got) != "a\nb\nc\n" {
		t.Fatalf("read back %q (%v); want the appends in order", got, err)
	}
	if note != "" {
		if got, _, err := b.dir.note(key); err != nil || got != note {
			t.Fatalf("note %q (%v); want %q", got, err, note)
		}
	}
	s.Discard() // after a commit: nothing to do
	if _, err := b.ReadAll(ctx, key); err != nil {
		t.Fatalf("a discard after the commit removed the object: %v", err)
	}

	// if-not-exist leaves an object there as it is.
	s2, _ := b.Stage()
	_ = s2.Append([]byte("other\n"))
	if err := b.Commit(ctx, s2, key, Options{IfNotExist: true}); !errors.Is(err, ErrExists) {
		t.Fatalf("commit over an object, if-not-exist: %v; want ErrExists", err)
	}
	s2.Discard()
	if got, _ := b.ReadAll(ctx, key); string(got) != "a\nb\nc\n" {
		t.Fatalf("the object was replaced: %q", got)
	}
	if n := tempFiles(t, root); n != 0 {
		t.Fatalf("%d temporary files left; want none", n)
	}
	if err := s2.Append([]byte("x")); err == nil {
		t.Fatal("an append after the discard was taken")
	}
}

// More staged objects than maxOpenStaged are written with their files
// closed between appends: each reads back whole, and no more than the
// bound stay open.
func TestStagedObjectsPastTheBoundCloseTheirFiles(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := maxOpenStaged + 50
	staged := make([]*Staged, n)
	for i := range staged {
		if staged[i], err = b.Stage(); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 3; round++ {
		for i, s := range staged {
			if err := s.Append([]byte(fmt.Sprintf("%d.%d\n", i, round))); err != nil {
				t.Fatal(err)
			}
			if open := b.dir.open.Load(); open > maxOpenStaged+1 {
				t.Fatalf("%d staged files open; want at most %d", open, maxOpenStaged+1)
			}
		}
	}
	for i, s := range staged {
		if err := b.Commit(ctx, s, fmt.Sprintf("t/%d.json", i), Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, maxOpenStaged, n - 1} {
		want := fmt.Sprintf("%d.0\n%d.1\n%d.2\n", i, i, i)
		if got, err := b.ReadAll(ctx, fmt.Sprintf("t/%d.json", i)); err != nil || string(got) != want {
			t.Fatalf("object %d reads %q (%v); want %q", i, got, err, want)
		}
	}
	if open := b.dir.open.Load(); open != 0 {
		t.Fatalf("%d files open after every commit; want 0", open)
	}
}

func walkAll(t *testing.T, b *Bucket) []string {
	t.Helper()
	var keys []string
	if err := b.Walk(context.Background(), "", func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

func tempFiles(t *testing.T, root string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(filepath.Join(root, TempDir), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && !strings.HasSuffix(p, ".lock") {
			n++
		}
		return nil
	})
	return n
}

// The temporary files of a process that is gone (its lock file there, no
// process holding it) are removed when another starts staging objects in
// the bucket; those of processes alive, and of this one, are not.
func TestStagingRemovesWhatDeadProcessesLeft(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mine, err := a.Stage()
	if err != nil {
		t.Fatal(err)
	}
	_ = mine.Append([]byte("mine\n"))
	tmp := filepath.Join(root, TempDir)
	shard := filepath.Join(tmp, "07")
	if err := os.MkdirAll(shard, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A dead process: its lock file, held by nobody, and its files.
	write(filepath.Join(tmp, "999-dead.lock"))
	write(filepath.Join(shard, "999-dead-1.tmp"))
	write(filepath.Join(shard, "999-dead-2.tmp"))
	// A live one: its lock held.
	write(filepath.Join(tmp, "998-live.lock"))
	held, err := os.Open(filepath.Join(tmp, "998-live.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(shard, "998-live-1.tmp"))
	// A writer of whole objects keeps no lock: its file is left alone.
	write(filepath.Join(shard, "997-put-1.tmp"))

	b, err := Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.Stage()
	if err != nil {
		t.Fatal(err)
	}
	s.Discard()
	for _, gone := range []string{"999-dead.lock", "07/999-dead-1.tmp", "07/999-dead-2.tmp"} {
		if _, err := os.Stat(filepath.Join(tmp, gone)); !os.IsNotExist(err) {
			t.Errorf("%s of a dead process is still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{"998-live.lock", "07/998-live-1.tmp", "07/997-put-1.tmp"} {
		if _, err := os.Stat(filepath.Join(tmp, kept)); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	if err := a.Commit(ctx, mine, "t/mine.json", Options{}); err != nil {
		t.Fatalf("this process's staged object after another's sweep: %v", err)
	}
}

// A staged file closed to keep the open files bounded reports a write's
// error at that close on a network file system: the object is not placed
// whole-looking at its commit, which says it is torn.
func TestAStagedObjectWhoseParkingCloseFailedIsTorn(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.Stage()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append([]byte("row\n")); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	_ = syscall.Close(int(s.f.Fd())) // its close fails now, as a late write error would
	s.parkLocked()
	s.mu.Unlock()
	if err := b.Commit(ctx, s, "t/x.json", Options{}); !errors.Is(err, ErrTorn) {
		t.Fatalf("commit after a failed close: %v; want ErrTorn", err)
	}
}
