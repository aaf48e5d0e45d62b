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
// not in it from its oldest). A non-nil from is moved past each message
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
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer consumer.Close()
	for _, p := range parts {
		end, err := client.GetOffset(cfg.Topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("end offset of partition %d: %w", p, err)
		}
		begin, err := client.GetOffset(cfg.Topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("start offset of partition %d: %w", p, err)
		}
		if at, ok := from[p]; ok && at > begin {
			begin = at
		}
		if begin >= end {
			continue
		}
		pc, err := consumer.ConsumePartition(cfg.Topic, p, begin)
		if err != nil {
			return fmt.Errorf("consume partition %d: %w", p, err)
		}
		err = func() error {
			defer pc.Close()
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case cerr := <-pc.Errors():
					return fmt.Errorf("partition %d: %w", p, cerr)
				case m := <-pc.Messages():
					if err := visit(p, m.Offset, m.Value); err != nil {
						return err
					}
					if from != nil {
						from[p] = m.Offset + 1
					}
					if m.Offset+1 >= end {
						return nil
					}
				}
			}
		}()
		if err != nil {
			return err
		}
	}
	return nil
}
