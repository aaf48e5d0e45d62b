package storage

import (
	"bytes"
	"context"
	"fmt"
	"path"

	objects "github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// readBack reads a storage sink's bucket back (codec.ReadBack).
type readBack struct {
	cfg    Config
	bucket *objects.Bucket
}

// OpenReadBack opens a storage sink's bucket to read what it holds.
func OpenReadBack(ctx context.Context, uri string) (codec.ReadBack, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	b, err := OpenBucket(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &readBack{cfg: cfg, bucket: b}, nil
}

// Rows visits the rows of the sink's schema directory, stream by stream
// (Scan's order); schema changes are in schema files, not among them.
func (r *readBack) Rows(ctx context.Context, visit func(string, codec.MessageKind, codec.Row, model.Ts) error) error {
	streams, err := Scan(ctx, r.bucket, r.cfg)
	if err != nil {
		return fmt.Errorf("read the sink: %w", err)
	}
	for _, st := range streams {
		for _, row := range st.Rows {
			row.TableVersion = st.Version
			if err := visit(st.Dispatcher, codec.MessageRow, row, row.CommitTs); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *readBack) DDLInline() bool { return false }

func (r *readBack) Changes(ctx context.Context) ([]codec.ChangeStream, []codec.SchemaChange, error) {
	streams, err := ScanChanges(ctx, r.bucket, r.cfg)
	if err != nil {
		return nil, nil, err
	}
	schemas, err := ScanSchemaChanges(ctx, r.bucket)
	return streams, schemas, err
}

// Transactions reads the files of the transactions' records, in no
// particular order.
func (r *readBack) Transactions(ctx context.Context, visit func([]byte) error) (bool, error) {
	if !r.cfg.TransactionMeta {
		return false, nil
	}
	err := r.bucket.Walk(ctx, txnDir+"/", func(key string) error {
		if m := dataFileName.FindStringSubmatch(path.Base(key)); m == nil || path.Dir(key) != txnDir {
			return nil // their indexes
		}
		body, err := r.bucket.ReadAll(ctx, key)
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		for line := range bytes.Lines(body) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			if err := visit(line); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		return nil
	})
	return true, err
}

func (r *readBack) Close() error { return r.bucket.Close() }
