package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

// changeReader reads every row change a sink holds, grouped in streams
// as one writer wrote them, and the schema changes it holds.
type changeReader func(ctx context.Context) ([]storage.ChangeStream, []storage.SchemaChange, error)

// openChanges opens a database changefeed's sink for rebuilding tables:
// a storage sink's canal-json or CSV files, or a Kafka topic's
// canal-json messages. The returned func releases it.
func openChanges(ctx context.Context, sinkURI string) (changeReader, func(), error) {
	if strings.HasPrefix(sinkURI, "kafka://") {
		cfg, err := kafka.ParseURI(sinkURI)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) ([]storage.ChangeStream, []storage.SchemaChange, error) {
			return kafkaChanges(ctx, cfg)
		}, func() {}, nil
	}
	cfg, bucket, err := openSink(ctx, sinkURI)
	if err != nil {
		return nil, nil, err
	}
	read := func(ctx context.Context) ([]storage.ChangeStream, []storage.SchemaChange, error) {
		streams, err := storage.ScanChanges(ctx, bucket, cfg)
		if err != nil {
			return nil, nil, err
		}
		schemas, err := storage.ScanSchemaChanges(ctx, bucket)
		return streams, schemas, err
	}
	return read, func() { bucket.Close() }, nil
}

// kafkaChanges reads a topic's row messages (schema changes and
// watermarks are skipped) into streams: per Kafka partition and table,
// cut where a position goes back. A dispatcher writes in position order,
// so a position going back is a replay after a crash (or another
// partition of the table interleaving, which is harmless to cut); a
// stream each, the rebuild takes a replayed change once.
func kafkaChanges(ctx context.Context, cfg kafka.Config) ([]storage.ChangeStream, []storage.SchemaChange, error) {
	type at struct {
		partition int32
		table     string
	}
	current := map[at]int{} // -> index in out
	var out []storage.ChangeStream
	schemas := map[storage.SchemaChange]bool{} // once, whatever the partitions it was written to
	err := kafka.ScanMessages(ctx, cfg, func(p int32, offset int64, value []byte) error {
		var env struct {
			Type     string `json:"type"`
			IsDdl    bool   `json:"isDdl"`
			Database string `json:"database"`
			Table    string `json:"table"`
			SQL      string `json:"sql"`
			TiDB     struct {
				CommitTs uint64 `json:"commitTs"`
			} `json:"_tidb"`
		}
		if err := json.Unmarshal(value, &env); err != nil {
			return fmt.Errorf("partition %d offset %d: %w", p, offset, err)
		}
		if env.IsDdl && env.SQL != "" {
			schemas[storage.SchemaChange{Database: env.Database, Table: env.Table, At: env.TiDB.CommitTs, Query: env.SQL}] = true
		}
		if env.IsDdl || env.Type == "TIDB_WATERMARK" {
			return nil
		}
		chs, err := codec.DecodeChanges(codec.ProtocolCanalJSON, value)
		if err != nil {
			return fmt.Errorf("partition %d offset %d: %w", p, offset, err)
		}
		for _, c := range chs {
			k := at{p, model.TableName(c.Database, c.Table)}
			i, ok := current[k]
			if ok {
				if n := len(out[i].Changes); n > 0 && c.CommitTs < out[i].Changes[n-1].CommitTs {
					ok = false
				}
			}
			if !ok {
				i = len(out)
				current[k] = i
				out = append(out, storage.ChangeStream{Dispatcher: fmt.Sprintf("kafka-%d-%d", p, i), Database: c.Database, Table: c.Table})
			}
			out[i].Changes = append(out[i].Changes, c)
		}
		return nil
	})
	var all []storage.SchemaChange
	for sc := range schemas {
		all = append(all, sc)
	}
	return out, all, err
}
