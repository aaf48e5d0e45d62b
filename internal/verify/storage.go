package verify

import (
	"context"
	"fmt"

	objects "github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Storage checks a storage sink's bucket against a deterministic source up to a
// checkpoint. Each dispatcher's stream is read in file order; streams are
// taken oldest first, so a key moved between dispatchers is seen in the
// order it was written, and a replay after a crash counts as duplicates.
func Storage(ctx context.Context, want source.Expectation, sinkURI string, upTo model.Ts) (Report, error) {
	cfg, bucket, err := openSink(ctx, sinkURI)
	if err != nil {
		return Report{}, err
	}
	defer bucket.Close()
	streams, err := storage.Scan(ctx, bucket, cfg)
	if err != nil {
		return Report{}, fmt.Errorf("read the sink: %w", err)
	}
	c := NewChecker(want, upTo)
	for _, st := range streams {
		for _, r := range st.Rows {
			c.Observe(Row{Table: r.Table, Key: r.Key, Version: r.Version, CommitTs: r.CommitTs, Value: r.Value})
		}
	}
	return c.Report(), nil
}

// openSink opens a storage sink's bucket for reading.
func openSink(ctx context.Context, sinkURI string) (storage.Config, *objects.Bucket, error) {
	cfg, err := storage.ParseURI(sinkURI)
	if err != nil {
		return cfg, nil, err
	}
	b, err := storage.OpenBucket(ctx, cfg)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, b, nil
}
