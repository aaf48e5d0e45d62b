package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"gocloud.dev/blob"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
)

// Stream is what one dispatcher wrote into one table-version directory,
// in file order.
type Stream struct {
	Dispatcher string
	Table      string
	Version    uint64
	Files      []string
	Rows       []codec.Row
}

// Scan reads every data file of a sink's bucket and returns one stream
// per (table version, dispatcher), each in file-index order.
func Scan(ctx context.Context, bucket *blob.Bucket, cfg Config) ([]Stream, error) {
	type key struct {
		table      string
		version    uint64
		dispatcher string
	}
	type file struct {
		path  string
		index uint64
	}
	files := map[key][]file{}
	it := bucket.List(&blob.ListOptions{Prefix: cfg.Schema + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list the sink's files: %w", err)
		}
		parts := strings.Split(obj.Key, "/")
		if len(parts) != 4 {
			continue // schema files, index files
		}
		m := dataFileName.FindStringSubmatch(parts[3])
		if m == nil {
			continue
		}
		version, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			continue
		}
		idx, _ := strconv.ParseUint(m[2], 10, 64)
		k := key{table: parts[1], version: version, dispatcher: m[1]}
		files[k] = append(files[k], file{path: obj.Key, index: idx})
	}
	var out []Stream
	for k, fs := range files {
		sort.Slice(fs, func(i, j int) bool { return fs[i].index < fs[j].index })
		st := Stream{Dispatcher: k.dispatcher, Table: k.table, Version: k.version}
		for _, f := range fs {
			body, err := bucket.ReadAll(ctx, f.path)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", f.path, err)
			}
			rows, err := codec.DecodeRows(cfg.Protocol, body)
			if err != nil {
				return nil, fmt.Errorf("decode %s: %w", f.path, err)
			}
			st.Files = append(st.Files, f.path)
			st.Rows = append(st.Rows, rows...)
		}
		out = append(out, st)
	}
	// Oldest first: a stream that began earlier delivered its keys earlier.
	sort.Slice(out, func(i, j int) bool {
		a, b := firstTs(out[i]), firstTs(out[j])
		if a != b {
			return a < b
		}
		return out[i].Dispatcher < out[j].Dispatcher
	})
	return out, nil
}

func firstTs(s Stream) uint64 {
	if len(s.Rows) == 0 {
		return 0
	}
	return uint64(s.Rows[0].CommitTs)
}

// ReadCheckpoint reads the metadata file's checkpoint, 0 if there is none.
func ReadCheckpoint(ctx context.Context, bucket *blob.Bucket) (uint64, error) {
	body, err := bucket.ReadAll(ctx, metadataFile)
	if err != nil {
		if isNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	var m metadata
	if err := json.Unmarshal(body, &m); err != nil {
		return 0, fmt.Errorf("metadata file: %w", err)
	}
	return m.CheckpointTs, nil
}
