package storage

// This file is the sink's write path: a batch admitted, encoded by
// directory, and put where it waits for its flush (memory, the disk
// spool, or its files' temporary files).

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
)

// Write implements sink.Sink: rows are encoded into the spool at once; the
// batch is flush-acked when its data file and index are written.
func (s *Sink) Write(ctx context.Context, b *sink.Batch) error {
	if strings.ContainsAny(b.Dispatcher, "/_\\") || b.Dispatcher == "" {
		return fmt.Errorf("storage sink: dispatcher id %q must be non-empty without '/', '\\' or '_'", b.Dispatcher)
	}
	s.mu.Lock()
	err := s.fencedErr(b.Dispatcher)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// Admission comes before encoding, so that a writer waiting for room
	// holds its batch only, not its encoded rows as well: it takes an
	// estimate (the sink's recent bytes per row), and the exact size once
	// encoded.
	held := s.rowBytes.estimate(len(b.Events))
	if err := s.admit(ctx, held); err != nil {
		return err
	}
	order, size, err := s.encode(b)
	if err != nil {
		s.release(held)
		return err
	}
	s.rowBytes.learn(len(b.Events), size)
	s.resize(held, size)
	var staged *stagedWrite
	if s.staging {
		// Into the files' own temporary files, outside s.mu.
		if staged, err = s.stage(b.Dispatcher, order); staged == nil {
			s.release(size)
			return err
		}
	} else if s.disk != nil {
		// A write into the page cache, outside s.mu; the rows leave
		// memory here.
		if err := s.toDisk(order); err != nil {
			s.release(size)
			return fmt.Errorf("storage sink: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = s.closedErr()
	}
	if err == nil {
		err = s.fencedErr(b.Dispatcher) // failed while this one waited
	}
	if err != nil {
		if staged != nil {
			s.unstageLocked(staged, false)
		}
		s.release(size)
		s.freeDisk(order)
		return err
	}
	d := s.dispatcherLocked(b.Dispatcher)
	if staged == nil {
		for _, db := range order {
			d.appendDir(db, &s.spare)
		}
	}
	if d.bytes == 0 && size > 0 {
		// Only rows count towards max-active-tables: a dispatcher whose
		// batches are empty (its position moved, no row) holds nothing,
		// and counting the 33,000 idle ones of a capture kept the cap
		// exceeded for good, so that every empty batch was flushed on
		// its own at once instead of with the next 200 ms of them.
		s.waiting++
	}
	if d.bytes == 0 && size > 0 || d.since.IsZero() {
		d.since = s.now()
		s.due.add(d)
	}
	d.bytes += size
	s.queued += size
	d.lastWrite = s.now()
	d.pending = append(d.pending, b)
	d.seq++
	s.spooled += size
	s.metrics.Backlog(size, 0)
	if !d.active {
		d.active = true
		s.metrics.ActiveTables(1)
	}
	if d.bytes >= s.cfg.fileTarget() {
		if d.bytes-size < s.cfg.fileTarget() {
			s.due.urge(d) // once, as it fills
		}
		s.wakeFlusher()
	}
	if staged != nil {
		s.unstageLocked(staged, true)
	}
	return nil
}

// dispatcherLocked is the state of dispatcher id, made if new; s.mu is
// held.
func (s *Sink) dispatcherLocked(id string) *dispatcherState {
	d := s.disp[id]
	if d == nil {
		d = &dispatcherState{id: id, nextIndex: map[string]uint64{}, resumed: s.resumed[id]}
		s.disp[id] = d
	}
	return d
}

// dirBuf is d's buffer of directory dir, or nil. From the end: a
// partition's rows are of one table version at a time, so its directory
// is the last one or, with transaction-meta, the one before the
// transactions' records.
func (d *dispatcherState) dirBuf(dir string) *dirBuffer {
	for i := len(d.bufs) - 1; i >= 0; i-- {
		if d.bufs[i].dir == dir {
			return d.bufs[i]
		}
	}
	return nil
}

// encode encodes a batch's rows by directory, in order, and returns the
// directories' buffers and their bytes.
func (s *Sink) encode(b *sink.Batch) ([]*dirBuffer, int64, error) {
	enc := map[string]*dirBuffer{}
	var order []*dirBuffer
	date := ""
	if layout, ok := dateLayouts[s.cfg.DateSeparator]; ok {
		date = s.now().UTC().Format(layout)
	}
	var size int64
	// A batch's rows are mostly of one table version: its directory's
	// name is made once for a run of them, not per row.
	var last *row.Event
	dir := ""
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind != row.KindDML {
			return nil, 0, fmt.Errorf("storage sink: Write takes DML only; DDL goes through WriteDDL")
		}
		if last == nil || e.Def != last.Def || e.Table != last.Table || e.TableVersion != last.TableVersion {
			dir = dirOf(s.cfg.Schema, e)
			if date != "" {
				dir += "/" + date
			}
			last = e
		}
		db := enc[dir]
		if db == nil {
			db = &dirBuffer{dir: dir, first: *e}
			enc[dir] = db
			order = append(order, db)
		}
		before := db.buf.Len()
		if err := codec.EncodeRow(&db.buf, s.cfg.Protocol, s.cfg.Schema, e); err != nil {
			return nil, 0, err
		}
		n := db.buf.Len() - before
		if before == 0 {
			// Room for the batch's rows like this one, at once: a buffer
			// doubled row by row clears and copies its bytes again at
			// every step (a tenth of the sink's CPU). A written file's
			// buffer is taken if it is large enough: a new one of a
			// megabyte is cleared first, and its pages faulted in.
			s.spare.grow(&db.buf, n*(len(b.Events)-i-1)*9/8)
		}
		size += int64(n)
	}
	if len(b.Txns) > 0 && s.cfg.TransactionMeta {
		// The transactions' BEGIN and END records: files of their own in
		// the partition's sequence, written and indexed as a table's.
		dir := txnDir
		if date != "" {
			dir += "/" + date
		}
		db := &dirBuffer{dir: dir, first: b.Txns[0]}
		var recs []byte
		for i := range b.Txns {
			recs = codec.AppendTxnRecords(recs, &b.Txns[i])
		}
		db.buf.Write(recs)
		order = append(order, db)
		size += int64(len(recs))
	}
	return order, size, nil
}

// appendDir adds a batch's rows of one directory to what the dispatcher
// holds for the next flush: to the directory's buffer if it has one (a
// flush writes one file per directory; two buffers of one directory would
// take the same file name), else as a new one.
func (d *dispatcherState) appendDir(db *dirBuffer, spare *spareBuffers) {
	have := d.dirBuf(db.dir)
	if db.extents != nil {
		if have != nil {
			have.extents = append(have.extents, db.extents...)
			return
		}
		d.bufs = append(d.bufs, db)
		return
	}
	chunk := db.buf.Bytes()
	if cap(chunk) > 2*len(chunk)+4096 {
		chunk = bytes.Clone(chunk) // the spool counts bytes: hold no more
		spare.put(db.buf.Bytes())
	}
	db.buf = bytes.Buffer{}
	if have != nil {
		have.chunks = append(have.chunks, chunk)
		return
	}
	db.chunks = [][]byte{chunk}
	d.bufs = append(d.bufs, db)
}

// toDisk moves encoded rows into the disk spool, in order.
func (s *Sink) toDisk(order []*dirBuffer) error {
	for i, db := range order {
		e, err := s.disk.append(db.buf.Bytes())
		if err != nil {
			s.freeDisk(order[:i])
			return err
		}
		s.spare.put(db.buf.Bytes()) // in the page cache now
		db.extents, db.buf = []extent{e}, bytes.Buffer{}
	}
	return nil
}

// freeDisk gives back the disk spool's room of rows written or dropped.
func (s *Sink) freeDisk(bufs []*dirBuffer) {
	if s.disk == nil {
		return
	}
	for _, db := range bufs {
		s.disk.release(db.extents)
		db.extents = nil
	}
}
