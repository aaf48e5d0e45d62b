package storage

// This file is spool=bucket: a file:// sink writes each batch's rows into
// the temporary file of the data file they will be in (bucket.Staged), at
// once, and its flush renames the file into place. Rows held in memory
// until the flush (spool=memory) were written into memory the cache no
// longer held and read back from it at the flush; a disk spool writes
// them twice and reads them once. Here every byte is written once, as a
// plain writer of the same files does (BenchmarkStorageSink).
//
// What a flush writes is what it took: a write appending to a
// dispatcher's staged files holds them (appending), and no flush round
// takes the dispatcher's files until it is done; a round that passed it
// over for that queues it again (requeue) when the write ends. Files a
// fence or Close drops meanwhile are the write's to discard (orphans).
// A staged file is never seen by readers; after a crash the source
// replays from the checkpoint, as with the other spools.

import (
	"bytes"
	"fmt"
	"slices"
)

// stagedWrite is one Write's appends: its dispatcher, and the
// directories' buffers it appended to.
type stagedWrite struct {
	d       *dispatcherState
	targets []*dirBuffer
}

// stage appends a batch's encoded rows, by directory, to its dispatcher's
// staged files, making those it has not. It returns nil only when
// nothing was appended (the sink closed, the dispatcher fenced); with an
// error otherwise, what it appended is cut off again and the caller
// passes the write to unstageLocked.
func (s *Sink) stage(id string, order []*dirBuffer) (*stagedWrite, error) {
	s.mu.Lock()
	err := s.closedErr()
	if err == nil {
		err = s.fencedErr(id)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	d := s.dispatcherLocked(id)
	w := &stagedWrite{d: d, targets: make([]*dirBuffer, len(order))}
	for i, db := range order {
		t := d.dirBuf(db.dir)
		if t == nil {
			t = &dirBuffer{dir: db.dir, first: db.first}
			d.bufs = append(d.bufs, t)
		}
		w.targets[i] = t
	}
	d.appending++
	s.mu.Unlock()

	d.stageMu.Lock()
	defer d.stageMu.Unlock()
	var before []int64 // of the targets tried
	for i, db := range order {
		t := w.targets[i]
		if t.staged == nil {
			if t.staged, err = s.bucket.Stage(); err != nil {
				break
			}
		}
		before = append(before, t.staged.Size())
		err = t.staged.Append(db.buf.Bytes())
		s.spare.put(db.buf.Bytes()) // in the page cache now
		db.buf = bytes.Buffer{}
		if err != nil {
			break
		}
	}
	if err != nil {
		// The batch is refused whole: none of its rows may be in a file.
		for i, size := range before {
			w.targets[i].staged.Cut(size)
		}
		err = fmt.Errorf("storage sink: write into %s's temporary file: %w; free space there or use spool=memory", s.cfg.BucketURL, err)
	}
	return w, err
}

// unstageLocked ends a write's appends; ok says its batch was taken.
// s.mu is held.
func (s *Sink) unstageLocked(w *stagedWrite, ok bool) {
	d := w.d
	d.appending--
	for _, t := range w.targets {
		held := slices.Contains(d.bufs, t)
		if held && !ok && (t.staged == nil || t.staged.Size() == 0) {
			// Made by this write, which put nothing in it.
			d.bufs = slices.DeleteFunc(d.bufs, func(b *dirBuffer) bool { return b == t })
			held = false
		}
		if !held {
			d.orphans = append(d.orphans, t)
		}
	}
	if d.appending > 0 {
		return
	}
	if s.closed {
		// Close left the files of a dispatcher being written to it.
		d.orphans = append(d.orphans, d.bufs...)
		d.bufs = nil
	}
	for _, t := range d.orphans {
		if t.staged != nil {
			t.staged.Discard()
		}
	}
	d.orphans = nil
	if d.requeue && d.waits() {
		d.requeue = false
		s.due.add(d)
		if d.flushWanted || d.bytes >= s.cfg.fileTarget() {
			s.due.urge(d)
		}
		s.wakeFlusher()
	}
}

// dropLocked gives up the staged files of bufs, which their dispatcher
// no longer holds (fenced, or the sink closed): at once, or by the write
// appending to them when it ends. s.mu is held.
func (s *Sink) dropLocked(d *dispatcherState, bufs []*dirBuffer) {
	if !s.staging {
		return
	}
	if d.appending > 0 {
		d.orphans = append(d.orphans, bufs...)
		return
	}
	discardStaged(bufs)
}

// discardStaged discards the staged files of bufs (a flush's, written or
// failed: written ones are placed, and this does nothing to them).
func discardStaged(bufs []*dirBuffer) {
	for _, db := range bufs {
		if db.staged != nil {
			db.staged.Discard()
		}
	}
}
