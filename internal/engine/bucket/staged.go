package bucket

// This file writes a file:// bucket's objects in place: an object's bytes
// go into its temporary file as they come, and it is renamed under its
// key when it is whole. A storage sink with spool=bucket writes its rows
// so instead of holding a file's worth until its flush: every byte passes
// through memory once, as in a plain writer of the files, where a held
// file's bytes were written into memory the cache no longer held and read
// back from it at the flush (issue 34: the sink at 0.7 of such a writer).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// maxOpenStaged bounds the staged objects whose files stay open between
// appends, per bucket: past it an append opens its file and closes it
// again, so that a sink writing into thousands of tables at once does
// not run the process out of file descriptors.
const maxOpenStaged = 256

// ErrTorn is Commit's error when the staged object's bytes cannot be
// trusted (its file failed to close): it is not tried again.
var ErrTorn = errors.New("the staged object's file failed to close; its bytes are not known to be whole")

// Staged is an object being written in place. One goroutine appends at a
// time (its mutex keeps two apart); Commit and Discard come after the
// appends.
type Staged struct {
	d   *dirWrites
	mu  sync.Mutex
	f   *os.File // nil while parked (closed between appends) or closed
	tmp string   // "" once placed or discarded
	// size is what the object holds; a failed append may leave bytes
	// past it, which the next append overwrites and Commit cuts off.
	size   int64
	torn   bool
	closed bool  // f closed for good (Commit)
	lost   error // the close failed: ErrTorn for good
}

// Stages says whether the bucket writes objects in place (file://).
func (b *Bucket) Stages() bool { return b.dir != nil }

// Stage starts an object written in place.
func (b *Bucket) Stage() (*Staged, error) {
	if b.dir == nil {
		return nil, errors.New("only a file:// bucket writes objects in place")
	}
	b.dir.mu.Lock()
	b.dir.holdLocked()
	b.dir.mu.Unlock()
	// Any name spreads the files over the shards: the key is not known
	// yet (a sink numbers its files at the flush).
	f, tmp, err := b.dir.temp(strconv.FormatUint(b.dir.seq.Load(), 10))
	if err != nil {
		return nil, err
	}
	b.dir.open.Add(1)
	s := &Staged{d: b.dir, f: f, tmp: tmp}
	if b.dir.open.Load() > maxOpenStaged {
		s.parkLocked()
	}
	return s, nil
}

// Size is the bytes appended.
func (s *Staged) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Append writes p at the end of the object.
func (s *Staged) Append(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tmp == "" || s.closed {
		return errors.New("append to a staged object already placed or discarded")
	}
	if s.f == nil {
		f, err := os.OpenFile(s.tmp, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		s.f = f
		s.d.open.Add(1)
	}
	n, err := s.f.WriteAt(p, s.size)
	if err != nil {
		s.torn = true
		return err
	}
	s.size += int64(n)
	if s.d.open.Load() > maxOpenStaged {
		s.parkLocked()
	}
	return nil
}

// Cut takes back what was appended after the object held size bytes.
func (s *Staged) Cut(size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if size < s.size {
		s.size, s.torn = size, true
	}
}

func (s *Staged) parkLocked() {
	if s.f != nil {
		// On a network file system (NFS, FUSE) a write's error (ENOSPC,
		// EDQUOT, EIO) may come at the close only: the object is lost,
		// and Commit must not place it (as its own close's error).
		if err := s.f.Close(); err != nil && s.lost == nil {
			s.lost = fmt.Errorf("%w: %v", ErrTorn, err)
		}
		s.f = nil
		s.d.open.Add(-1)
	}
}

// Commit places the object under key; readers see all of it or nothing.
// After an error other than ErrTorn it may be called again; the object
// is given up with Discard.
func (b *Bucket) Commit(ctx context.Context, s *Staged, key string, o Options) error {
	if !plainKey(key) {
		return fmt.Errorf("object key %q is not a plain relative path (no control characters, \"//\", \"..\" or trailing slash)", key)
	}
	if !NoteFits(o.Note) {
		return noteTooLong(key, o.Note)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tmp == "" {
		return errors.New("commit of a staged object already placed or discarded")
	}
	if s.lost != nil {
		return s.lost
	}
	if !s.closed {
		f := s.f
		if f == nil {
			var err error
			if f, err = os.OpenFile(s.tmp, os.O_WRONLY, 0); err != nil {
				return err
			}
			s.d.open.Add(1)
		}
		s.f = f
		var err error
		if s.torn {
			err = f.Truncate(s.size)
		}
		if err == nil && o.Note != "" {
			err = setNote(f, o.Note)
		}
		if err != nil {
			return err // the file stays open for another try
		}
		if err := s.d.fsync(ctx, f); err != nil {
			if ctx.Err() != nil {
				return err // not a failed sync: the file stays open for another try
			}
			// Linux reports a failed write back once and marks its pages
			// clean: a second fsync would succeed over lost data.
			s.lost = fmt.Errorf("%w: fsync: %v", ErrTorn, err)
			return s.lost
		}
		s.f, s.closed = nil, true
		s.d.open.Add(-1)
		if err := f.Close(); err != nil {
			// A network file system reports failed writes here.
			s.lost = fmt.Errorf("%w: %v", ErrTorn, err)
			return s.lost
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.dir.place(ctx, s.tmp, filepath.Join(b.dir.root, filepath.FromSlash(key)), o.IfNotExist); err != nil {
		return err
	}
	s.tmp = ""
	return nil
}

// Discard gives the object up; nothing of it remains. It may follow a
// Commit that placed it (then it does nothing).
func (s *Staged) Discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parkLocked()
	if s.tmp != "" {
		_ = os.Remove(s.tmp)
		s.tmp = ""
	}
}
