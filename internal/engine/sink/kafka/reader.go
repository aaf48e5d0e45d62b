package kafka

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Scan reads every partition of the sink's topic from the oldest offset up
// to its current end, in offset order, and passes each message on decoded.
// Every version of a key lives in one partition, so offset order is the
// key's delivery order.
func Scan(ctx context.Context, cfg Config, visit func(partition int32, kind codec.MessageKind, row codec.Row, ts model.Ts) error) error {
	return ScanMessages(ctx, cfg, func(p int32, offset int64, value []byte) error {
		kind, row, ts, err := codec.DecodeCanalMessage(value)
		if err != nil {
			return fmt.Errorf("partition %d offset %d: %w", p, offset, err)
		}
		return visit(p, kind, row, ts)
	})
}

// ScanMessages reads every partition of the sink's topic from the oldest
// offset up to its current end, in offset order, and passes each
// message's value on as it is.
func ScanMessages(ctx context.Context, cfg Config, visit func(partition int32, offset int64, value []byte) error) error {
	return ScanMessagesFrom(ctx, cfg, nil, visit)
}

// ScanMessagesFrom is ScanMessages from the offsets in from (a partition
// not in it from its oldest). It reads as a read_committed consumer: what
// an exactly-once sink wrote in a transaction that was aborted, or is
// still open, is not passed on. A non-nil from is moved past each message
// passed on, so that calling again reads only what came since: a
// follower of a growing topic reads each message once.
func ScanMessagesFrom(ctx context.Context, cfg Config, from map[int32]int64, visit func(partition int32, offset int64, value []byte) error) error {
	sc := saramaConfig(cfg)
	if err := cfg.Security.apply(sc); err != nil {
		return err
	}
	sc.Consumer.Return.Errors = true
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return fmt.Errorf("cannot reach Kafka at %v: %v", cfg.Brokers, err)
	}
	defer client.Close()
	parts, err := client.Partitions(cfg.Topic)
	if err != nil {
		return fmt.Errorf("topic %q: %w", cfg.Topic, err)
	}
	for _, p := range parts {
		begin := sarama.OffsetOldest
		if at, ok := from[p]; ok {
			begin = at
		}
		next, err := readCommitted(ctx, client, cfg.Topic, p, begin, func(r committedRecord) error {
			if err := visit(p, r.Offset, r.Value); err != nil {
				return err
			}
			if from != nil {
				from[p] = r.Offset + 1
			}
			return nil
		})
		if err != nil {
			return err
		}
		if from != nil {
			from[p] = next // past markers and aborted records too
		}
	}
	return nil
}
