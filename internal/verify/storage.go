package verify

import (
	"context"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	sinks "github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Sink reads what a sink holds (a storage sink's files, a Kafka topic)
// and checks it against a deterministic source up to upTo. A sink that
// carries schema changes among its rows (Kafka) has their placement
// checked too: every row of a table on the right side of its DDLs, and
// no DDL repeated or out of order, per stream; one that keeps a table's
// versions apart (a storage sink's directories) has every row in the
// files of the version in force when it was committed (a consumer reads
// a version's rows under its schema).
func Sink(ctx context.Context, want source.Expectation, sinkURI string, upTo model.Ts) (Report, error) {
	sink, err := sinks.ReadBack(ctx, sinkURI)
	if err != nil {
		return Report{}, err
	}
	defer sink.Close()
	c := NewChecker(want, upTo)
	inline := sink.DDLInline()
	type at struct{ stream, table string }
	lastDDL := map[at]model.Ts{}
	err = sink.Rows(ctx, func(stream string, kind codec.MessageKind, r codec.Row, ts model.Ts) error {
		k := at{stream, r.Table}
		switch {
		case kind == codec.MessageDDL && inline:
			if ts <= lastDDL[k] {
				c.Misplaced(fmt.Sprintf("%s: DDL of %s at %d repeated or out of order", stream, r.Table, ts))
			}
			lastDDL[k] = max(lastDDL[k], ts)
		case kind == codec.MessageRow:
			if inline {
				if need := want.SchemaSince(r.CommitTs); need != 0 && lastDDL[k] < need {
					c.Misplaced(fmt.Sprintf("%s: %s/%s version %d arrived before the DDL at %d it was written after", stream, r.Table, r.Key, r.Version, need))
				} else if lastDDL[k] > r.CommitTs {
					c.Misplaced(fmt.Sprintf("%s: %s/%s version %d arrived after the DDL at %d it was written before", stream, r.Table, r.Key, r.Version, lastDDL[k]))
				}
			}
			if v := model.Ts(r.TableVersion); v != 0 {
				// The version in force at the row: the schema since its
				// DDL, or the first (no DDL before it or the version).
				need := want.SchemaSince(r.CommitTs)
				if need != 0 && v != need || need == 0 && want.SchemaSince(v) != 0 {
					c.Misplaced(fmt.Sprintf("%s: %s/%s version %d, committed at %d, is in the files of table version %d, not of the schema in force then", stream, r.Table, r.Key, r.Version, r.CommitTs, v))
				}
			}
			c.Observe(Row{Table: r.Table, Key: r.Key, Version: r.Version, CommitTs: r.CommitTs, Value: r.Value})
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	return c.Report(), nil
}

// Storage checks a storage sink (file://, s3://, ...): Sink.
func Storage(ctx context.Context, want source.Expectation, sinkURI string, upTo model.Ts) (Report, error) {
	return Sink(ctx, want, sinkURI, upTo)
}

// Kafka checks a Kafka sink's topic: Sink.
func Kafka(ctx context.Context, want source.Expectation, sinkURI string, upTo model.Ts) (Report, error) {
	return Sink(ctx, want, sinkURI, upTo)
}
