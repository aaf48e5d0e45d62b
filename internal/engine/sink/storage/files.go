package storage

// This file writes the sink's objects: data files and their indexes,
// schema files, the root metadata file.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/gcerrors"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// WriteDDL writes the schema file of the version a DDL creates.
func (s *Sink) WriteDDL(ctx context.Context, ddl row.Event) error {
	if ddl.Kind != row.KindDDL || ddl.Def == nil {
		return fmt.Errorf("storage sink: WriteDDL takes a DDL with the table definition it creates")
	}
	p, body := schemaFileFor(s.cfg.Schema, &ddl)
	return s.writeSchema(ctx, p, body)
}

func (s *Sink) writeSchema(ctx context.Context, p string, body []byte) error {
	s.mu.Lock()
	_, known := s.schemas[p]
	if known {
		s.schemas[p] = s.now()
	}
	s.mu.Unlock()
	if known {
		return nil
	}
	err := s.retried(ctx, p, func() error { return s.bucket.Put(ctx, p, [][]byte{body}, true) })
	if err != nil && !errors.Is(err, bucket.ErrExists) {
		return fmt.Errorf("write schema file %s: %w", p, err)
	}
	s.mu.Lock()
	s.schemas[p] = s.now()
	s.mu.Unlock()
	return nil
}

// WriteCheckpoint writes the root metadata file with the changefeed's
// checkpoint: everything up to it is in the bucket.
func (s *Sink) WriteCheckpoint(ctx context.Context, ts model.Ts) error {
	body, _ := json.Marshal(metadata{CheckpointTs: uint64(ts)})
	if s.tenure != nil {
		// A deposed maintainer's late checkpoint would move it back.
		if err := s.tenure.Hold(ctx); err != nil {
			return fmt.Errorf("not writing the checkpoint: %w", err)
		}
	}
	return s.bucket.Put(ctx, metadataFile, [][]byte{body}, false)
}

// writeFiles writes one data file per directory, then each directory's
// index naming its file. A batch is durable only when all exist. The
// indexes come after every data file, so that a flush cut between two
// directories leaves only files no index names, which the next owner of
// an exactly-once partition removes (progress.go). With exactly-once
// delivery the partition's progress object names the files first
// (progress.go), or a note on each of them does (notes.go).
func (s *Sink) writeFiles(d *dispatcherState, bufs []*dirBuffer, batches []*sink.Batch) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
	defer cancel()
	names := make([]string, len(bufs))
	idxs := make([]uint64, len(bufs))
	for i, db := range bufs {
		// Every later version is created by a DDL, whose schema file the
		// barrier writes before any row of that version; the first version
		// has no DDL, so its rows bring it.
		if db.first.Kind == row.KindDML && db.first.SchemaVersion == 0 {
			p, body := schemaFileFor(s.cfg.Schema, &db.first)
			began := time.Now()
			if err := s.writeSchema(ctx, p, body); err != nil {
				return err
			}
			s.metrics.WriteDuration("schema", time.Since(began))
		}
		idx, err := s.nextIndex(ctx, d, db.dir)
		if err != nil {
			return err
		}
		idxs[i], names[i] = idx, dataFile(db.dir, d.id, idx, s.cfg.Protocol.Ext())
	}
	note, err := s.record(ctx, d, batches, names)
	if err != nil {
		return err
	}
	for i, db := range bufs {
		name := names[i]
		began := time.Now()
		opts := bucket.Options{Note: note}
		put := func() error { return s.bucket.PutWith(ctx, name, db.chunks, opts) }
		if db.extents != nil {
			put = func() error { return s.bucket.PutFromWith(ctx, name, s.disk.reader(db.extents), opts) }
		}
		if db.staged != nil {
			put = func() error { return s.bucket.Commit(ctx, db.staged, name, opts) }
		}
		if err := s.retried(ctx, name, put); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		s.metrics.WriteDuration("data", time.Since(began))
	}
	for i, db := range bufs {
		name := names[i]
		base := name[strings.LastIndex(name, "/")+1:]
		began := time.Now()
		if err := s.retried(ctx, name, func() error {
			return s.bucket.Put(ctx, indexFile(db.dir, d.id), [][]byte{[]byte(base + "\n")}, false)
		}); err != nil {
			return fmt.Errorf("write the index of %s: %w", name, err)
		}
		s.metrics.WriteDuration("index", time.Since(began))
		s.mu.Lock()
		d.nextIndex[db.dir] = idxs[i] + 1
		s.mu.Unlock()
	}
	s.flushed(d, batches)
	return nil
}

// retried runs an upload (a data file, its index, a schema file) until it
// succeeds, tried again under the same name while the bucket refuses it
// for at most RetryTimeout: a bucket full or throttling for a few seconds
// then costs a delay, not a resumed partition writing its rows twice.
// The node's hold is asked before every attempt; errors that will not
// pass (no permission, no bucket) are not retried.
func (s *Sink) retried(ctx context.Context, name string, put func() error) error {
	deadline := time.Now().Add(s.cfg.RetryTimeout)
	pause := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if s.tenure != nil {
			if err := s.tenure.Hold(ctx); err != nil {
				return fmt.Errorf("not writing %s: %w", name, err)
			}
		}
		err := put()
		if err == nil || ctx.Err() != nil || !retryable(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		s.metrics.Retry()
		if attempt == 1 {
			s.log.Warn("storage sink: the bucket refused a request; trying again", "object", name, "retry_timeout", s.cfg.RetryTimeout, "err", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// retryable says an upload's error may pass by itself.
func retryable(err error) bool {
	if errors.Is(err, bucket.ErrExists) || errors.Is(err, bucket.ErrTorn) {
		return false // an answer, or lost
	}
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied, gcerrors.NotFound, gcerrors.InvalidArgument, gcerrors.Unimplemented, gcerrors.FailedPrecondition:
		return false
	}
	return true
}

// nextIndex continues a dispatcher's file numbering in a directory, from
// its index file if this process has not written there yet, so a
// re-created dispatcher never overwrites a file.
func (s *Sink) nextIndex(ctx context.Context, d *dispatcherState, dir string) (uint64, error) {
	s.mu.Lock()
	n, ok := d.nextIndex[dir]
	s.mu.Unlock()
	if ok {
		return n, nil
	}
	// Read as writes are made, within retry-timeout: a store that cannot
	// serve the read for a moment failed the flush at once.
	var body []byte
	err := s.retried(ctx, indexFile(dir, d.id), func() (err error) {
		body, err = s.bucket.ReadAll(ctx, indexFile(dir, d.id))
		return err
	})
	if gcerrors.Code(err) == gcerrors.NotFound {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the index of %s: %w", dir, err)
	}
	m := dataFileName.FindStringSubmatch(strings.TrimSpace(string(body)))
	if m == nil {
		return 0, fmt.Errorf("index file of %s in %s is not a data file name: %q", d.id, dir, body)
	}
	last, _ := strconv.ParseUint(m[2], 10, 64)
	return last + 1, nil
}
