package kafka

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// readBack reads a topic back (codec.ReadBack).
type readBack struct{ cfg Config }

// OpenReadBack reads what a Kafka sink's topic holds. It connects on
// each read.
func OpenReadBack(uri string) (codec.ReadBack, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return &readBack{cfg: cfg}, nil
}

// Rows visits the topic's messages partition by partition, each in
// offset order, schema changes among the rows as a consumer meets them.
func (r *readBack) Rows(ctx context.Context, visit func(string, codec.MessageKind, codec.Row, model.Ts) error) error {
	return Scan(ctx, r.cfg, func(p int32, kind codec.MessageKind, row codec.Row, ts model.Ts) error {
		return visit(fmt.Sprintf("partition %d", p), kind, row, ts)
	})
}

func (r *readBack) DDLInline() bool { return true }

func (r *readBack) Changes(ctx context.Context) ([]codec.ChangeStream, []codec.SchemaChange, error) {
	return scanChanges(ctx, r.cfg)
}

// Transactions reads the transaction topic as a read_committed
// consumer, partition by partition.
func (r *readBack) Transactions(ctx context.Context, visit func([]byte) error) (bool, error) {
	if !r.cfg.TransactionMeta {
		return false, nil
	}
	cfg := r.cfg
	cfg.Topic = cfg.transactionTopic()
	return true, ScanMessages(ctx, cfg, func(p int32, offset int64, value []byte) error {
		if err := visit(value); err != nil {
			return fmt.Errorf("%s partition %d offset %d: %w", cfg.Topic, p, offset, err)
		}
		return nil
	})
}

func (r *readBack) Close() error { return nil }

// scanChanges reads a topic's row messages (schema changes and
// watermarks are skipped) into streams: per Kafka partition and table,
// cut where a position goes back. A dispatcher writes in position order,
// so a position going back is a replay after a crash (or another
// partition of the table interleaving, which is harmless to cut); a
// stream each, the rebuild takes a replayed change once.
func scanChanges(ctx context.Context, cfg Config) ([]codec.ChangeStream, []codec.SchemaChange, error) {
	type at struct {
		partition int32
		table     string
	}
	current := map[at]int{} // -> index in out
	var out []codec.ChangeStream
	type ddl struct {
		database, table string
		at              uint64
		query           string
	}
	schemas := map[ddl]bool{} // once, whatever the partitions it was written to
	err := ScanMessages(ctx, cfg, func(p int32, offset int64, value []byte) error {
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
			schemas[ddl{env.Database, env.Table, env.TiDB.CommitTs, env.SQL}] = true
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
				out = append(out, codec.ChangeStream{Dispatcher: fmt.Sprintf("kafka-%d-%d", p, i), Reader: fmt.Sprintf("kafka partition %d", p), Database: c.Database, Table: c.Table})
			}
			out[i].Changes = append(out[i].Changes, c)
		}
		return nil
	})
	var all []codec.SchemaChange
	for sc := range schemas {
		all = append(all, codec.SchemaChange{Database: sc.database, Table: sc.table, At: sc.at, Query: sc.query})
	}
	return out, all, err
}
