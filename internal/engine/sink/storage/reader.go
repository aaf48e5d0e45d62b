package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	objects "github.com/cdcctl/cdcctl/internal/engine/bucket"
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

// streamKey names what one dispatcher wrote into one table version.
type streamKey struct {
	database, table string
	version         uint64
	dispatcher      string
}

type dataFileRef struct {
	path  string
	date  string // the date directory (date-separator), "" without
	index uint64
}

// listDataFiles lists the data files under a prefix by stream, each in
// file-index order.
func listDataFiles(ctx context.Context, bucket *objects.Bucket, prefix string) (map[streamKey][]dataFileRef, error) {
	files := map[streamKey][]dataFileRef{}
	err := eachObject(ctx, bucket, prefix, func(key string, parts []string) error {
		// <db>/<table>/<version>/[<date>/]CDC_<dispatcher>_<index>.<ext>;
		// schema files, index files and the metadata file are not.
		date := ""
		switch {
		case len(parts) == 5 && isDateDir(parts[3]):
			date = parts[3]
		case len(parts) != 4:
			return nil
		}
		m := dataFileName.FindStringSubmatch(parts[len(parts)-1])
		if m == nil {
			return nil
		}
		version, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			return nil
		}
		idx, _ := strconv.ParseUint(m[2], 10, 64)
		k := streamKey{database: parts[0], table: parts[1], version: version, dispatcher: m[1]}
		files[k] = append(files[k], dataFileRef{path: key, date: date, index: idx})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, fs := range files {
		// Dates sort as they come (2026 < 2026-11 < 2026-11-25), and a
		// date directory numbers its files from 1 again.
		sort.Slice(fs, func(i, j int) bool {
			if fs[i].date != fs[j].date {
				return fs[i].date < fs[j].date
			}
			return fs[i].index < fs[j].index
		})
	}
	return files, nil
}

// Scan reads every data file of a sink's bucket and returns one stream
// per (table version, dispatcher), each in file-index order.
func Scan(ctx context.Context, bucket *objects.Bucket, cfg Config) ([]Stream, error) {
	files, err := listDataFiles(ctx, bucket, cfg.Schema+"/")
	if err != nil {
		return nil, err
	}
	var out []Stream
	for k, fs := range files {
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
	// Two that began at the same row (a replay after a crash from where
	// the other began), the one that went further last, then the later
	// epoch (p1.10 after p1.9: by length first), as they were written.
	sort.Slice(out, func(i, j int) bool {
		a, b := firstTs(out[i]), firstTs(out[j])
		if a != b {
			return a < b
		}
		if a, b := lastTs(out[i]), lastTs(out[j]); a != b {
			return a < b
		}
		if a, b := out[i].Dispatcher, out[j].Dispatcher; len(a) != len(b) {
			return len(a) < len(b)
		}
		return out[i].Dispatcher < out[j].Dispatcher
	})
	return out, nil
}

// ChangeStream is what one dispatcher wrote into one table version of
// any database, decoded for rebuilding tables.
type ChangeStream = codec.ChangeStream

// ScanChanges reads every data file of a sink's bucket, whatever its
// database directory, as row changes: one stream per (table version,
// dispatcher), each in file order. CSV values are named by the columns
// of their table version's schema file.
func ScanChanges(ctx context.Context, bucket *objects.Bucket, cfg Config) ([]ChangeStream, error) {
	files, err := listDataFiles(ctx, bucket, "")
	if err != nil {
		return nil, err
	}
	var schemas map[versionKey]*tableSchema
	if cfg.Protocol == codec.ProtocolCSV {
		if schemas, err = scanSchemas(ctx, bucket); err != nil {
			return nil, err
		}
	}
	var out []ChangeStream
	for k, fs := range files {
		st := ChangeStream{Dispatcher: k.dispatcher, Database: k.database, Table: k.table, Version: k.version}
		decode := func(body []byte) ([]codec.Change, error) { return codec.DecodeChanges(cfg.Protocol, body) }
		if schemas != nil {
			sch := schemas[versionKey{k.database, k.table, k.version}]
			if sch == nil {
				return nil, fmt.Errorf("%s/%s/%d has CSV data files and no schema file (%s/%s/meta/schema_%d_*.json) to name their columns", k.database, k.table, k.version, k.database, k.table, k.version)
			}
			cols := sch.csvColumns()
			decode = func(body []byte) ([]codec.Change, error) { return codec.DecodeCSVChanges(body, cols) }
		}
		for _, f := range fs {
			body, err := bucket.ReadAll(ctx, f.path)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", f.path, err)
			}
			chs, err := decode(body)
			if err != nil {
				return nil, fmt.Errorf("decode %s: %w", f.path, err)
			}
			st.Changes = append(st.Changes, chs...)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Version != out[j].Version {
			return out[i].Version < out[j].Version
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

func lastTs(s Stream) uint64 {
	if len(s.Rows) == 0 {
		return 0
	}
	return uint64(s.Rows[len(s.Rows)-1].CommitTs)
}

// ReadCheckpoint reads the metadata file's checkpoint, 0 if there is none.
func ReadCheckpoint(ctx context.Context, bucket *objects.Bucket) (uint64, error) {
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

// SchemaChange is a schema change a sink holds: the statement that
// created a table version (its schema file's Query), at its position.
type SchemaChange = codec.SchemaChange

// ScanSchemaChanges reads the sink's schema files and returns those that
// a schema change created (a table's first version has no statement).
func ScanSchemaChanges(ctx context.Context, bucket *objects.Bucket) ([]SchemaChange, error) {
	all, err := scanSchemas(ctx, bucket)
	if err != nil {
		return nil, err
	}
	var out []SchemaChange
	for k, sch := range all {
		if sch.Query != "" {
			out = append(out, SchemaChange{Database: k.database, Table: k.table, At: sch.TableVersion, Query: sch.Query,
				Key: sch.csvColumns().PkNames, KeyKnown: true})
		}
	}
	return out, nil
}

// versionKey names a table version of a sink.
type versionKey struct {
	database, table string
	version         uint64
}

// scanSchemas reads every schema file of a sink: one per table version
// (a version's files written again after a restart are equal).
func scanSchemas(ctx context.Context, bucket *objects.Bucket) (map[versionKey]*tableSchema, error) {
	out := map[versionKey]*tableSchema{}
	err := eachObject(ctx, bucket, "", func(key string, parts []string) error {
		if len(parts) != 4 || parts[2] != "meta" || !strings.HasPrefix(parts[3], "schema_") {
			return nil
		}
		body, err := bucket.ReadAll(ctx, key)
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		var sch tableSchema
		if err := json.Unmarshal(body, &sch); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		out[versionKey{parts[0], parts[1], sch.TableVersion}] = &sch
		return nil
	})
	return out, err
}

// eachObject passes every object under a prefix on, its key and the key's
// path elements.
func eachObject(ctx context.Context, b *objects.Bucket, prefix string, fn func(key string, parts []string) error) error {
	var fnErr error
	err := b.Walk(ctx, prefix, func(key string) error {
		fnErr = fn(key, strings.Split(key, "/"))
		return fnErr
	})
	if err != nil && err != fnErr {
		return fmt.Errorf("list the sink's files: %w", err)
	}
	return err
}

// isDateDir says whether a path element is a date directory: 2026,
// 2026-11 or 2026-11-25.
func isDateDir(s string) bool {
	for _, layout := range dateLayouts {
		if len(s) == len(layout) {
			if _, err := time.Parse(layout, s); err == nil {
				return true
			}
		}
	}
	return false
}
