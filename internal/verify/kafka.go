package verify

import (
	"context"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Kafka checks a Kafka sink's topic against a deterministic source up to a
// checkpoint, partition by partition in offset order.
func Kafka(ctx context.Context, want source.Expectation, sinkURI string, upTo model.Ts) (Report, error) {
	cfg, err := kafka.ParseURI(sinkURI)
	if err != nil {
		return Report{}, err
	}
	c := NewChecker(want, upTo)
	// In every Kafka partition, a table's DDL must come after every row
	// committed before it and before every row committed after it, once.
	type pt struct {
		p     int32
		table string
	}
	lastDDL := map[pt]model.Ts{}
	err = kafka.Scan(ctx, cfg, func(p int32, kind codec.MessageKind, r codec.Row, ts model.Ts) error {
		switch kind {
		case codec.MessageDDL:
			k := pt{p, r.Table}
			if ts <= lastDDL[k] {
				c.Misplaced(fmt.Sprintf("partition %d: DDL of %s at %d repeated or out of order", p, r.Table, ts))
			}
			lastDDL[k] = max(lastDDL[k], ts)
		case codec.MessageRow:
			k := pt{p, r.Table}
			if need := want.SchemaSince(r.CommitTs); need != 0 && lastDDL[k] < need {
				c.Misplaced(fmt.Sprintf("partition %d: %s/%s version %d arrived before the DDL at %d it was written after", p, r.Table, r.Key, r.Version, need))
			} else if lastDDL[k] > r.CommitTs {
				c.Misplaced(fmt.Sprintf("partition %d: %s/%s version %d arrived after the DDL at %d it was written before", p, r.Table, r.Key, r.Version, lastDDL[k]))
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
