package bucket

// This file removes the temporary files of processes that are gone. A
// staged object (staged.go) lives in its temporary file until its flush,
// a file's worth of rows for each table a sink writes: a crashed process
// left them there for good. Each process that stages objects in a bucket
// holds a lock file beside them for as long as its bucket is open; the
// temporary files of a token whose lock no process holds are garbage.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// holdLocked takes this process's lock in the bucket and removes what
// dead processes left, once; d.mu is held.
func (d *dirWrites) holdLocked() {
	if d.lock != nil {
		return
	}
	dir := filepath.Join(d.root, TempDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return // Stage reports it
	}
	f, err := os.OpenFile(filepath.Join(dir, d.token+".lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		_ = f.Close()
		return
	}
	d.lock = f
	sweepDead(dir)
}

// sweepDead removes the temporary files (and lock) of every token under
// dir whose lock no process holds. A token without a lock file is left
// alone: it may be a process that writes objects whole (Put), whose
// temporary files live for one write.
func sweepDead(dir string) {
	entries, _ := os.ReadDir(dir)
	var dead []string
	for _, e := range entries {
		token, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || e.IsDir() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			dead = append(dead, token)
		}
		_ = f.Close()
	}
	if len(dead) == 0 {
		return
	}
	for _, shard := range entries {
		if !shard.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(dir, shard.Name()))
		for _, f := range files {
			for _, token := range dead {
				if strings.HasPrefix(f.Name(), token+"-") {
					_ = os.Remove(filepath.Join(dir, shard.Name(), f.Name()))
				}
			}
		}
	}
	for _, token := range dead {
		_ = os.Remove(filepath.Join(dir, token+".lock"))
	}
}

// release gives the lock back and removes it: this process's staged
// objects are discarded or placed by now.
func (d *dirWrites) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock != nil {
		_ = os.Remove(d.lock.Name())
		_ = d.lock.Close()
		d.lock = nil
	}
}

// Close closes the bucket; a file:// bucket gives up its lock (sweep.go).
func (b *Bucket) Close() error {
	if b.dir != nil {
		b.dir.release()
		if g := b.dir.group; g != nil {
			_ = g.close()
		}
	}
	return b.Bucket.Close()
}
