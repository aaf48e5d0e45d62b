package verify

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Kafka checks a Kafka sink's topic against the generator up to a
// checkpoint, partition by partition in offset order.
func Kafka(ctx context.Context, g *gen.Generator, sinkURI string, upTo model.Ts) (Report, error) {
	cfg, err := kafka.ParseURI(sinkURI)
	if err != nil {
		return Report{}, err
	}
	c := NewChecker(g, upTo)
	err = kafka.Scan(ctx, cfg, func(_ int32, kind codec.MessageKind, r codec.Row, _ model.Ts) error {
		if kind == codec.MessageRow {
			c.Observe(Row{Table: r.Table, Key: r.Key, Version: r.Version, CommitTs: r.CommitTs, Value: r.Value})
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	return c.Report(), nil
}
