package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// This file reads a partition as a read_committed consumer does, from an
// offset up to the partition's last stable offset as it was when the read
// began, and then returns (verify), or up to its high watermark, passing
// on only what is known committed (the progress records at a resume).
// sarama's consumer filters aborted transactions too, but it follows a
// partition without end, and a read that must stop at the last stable
// offset cannot tell when it got there: the last offsets before it may
// be transaction markers or aborted records, which it never hands over.

// committedRecord is one record of a committed (or non-transactional)
// batch.
type committedRecord struct {
	Offset int64
	Key    []byte
	Value  []byte
}

// fetchBytes bounds one fetch's answer.
const fetchBytes = 8 << 20

// fetchAt fetches topic's partition p from offset at (negative: the
// log's start) with the isolation given, retrying what is transient. An
// offset the log no longer holds (compacted or deleted) answers a block
// without records: the caller moves on to its LogStartOffset.
func fetchAt(ctx context.Context, client sarama.Client, topic string, p int32, at int64, iso sarama.IsolationLevel) (*sarama.FetchResponseBlock, error) {
	if at < 0 {
		at = 0
	}
	for attempts := 0; ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		leader, err := client.Leader(topic, p)
		if err != nil {
			return nil, fmt.Errorf("the leader of %s/%d: %w", topic, p, err)
		}
		_ = leader.Open(client.Config())
		req := &sarama.FetchRequest{Version: 4, MaxWaitTime: 50, MinBytes: 1, MaxBytes: fetchBytes, Isolation: iso}
		req.AddBlock(topic, p, at, fetchBytes, -1)
		res, err := leader.Fetch(req)
		var block *sarama.FetchResponseBlock
		if err == nil {
			if block = res.GetBlock(topic, p); block == nil {
				err = sarama.ErrIncompleteResponse
			} else if block.Err == sarama.ErrOffsetOutOfRange && at < block.LogStartOffset {
				return &sarama.FetchResponseBlock{LogStartOffset: block.LogStartOffset, HighWaterMarkOffset: -1, LastStableOffset: -1}, nil
			} else if block.Err != sarama.ErrNoError {
				err = block.Err
			}
		}
		if err == nil {
			return block, nil
		}
		attempts++
		if attempts > 20 || !IsTransient(err) {
			return nil, fmt.Errorf("read %s/%d at offset %d: %w", topic, p, at, err)
		}
		_ = leader.Close()
		_ = client.RefreshMetadata(topic)
		time.Sleep(backoff(attempts))
	}
}

// stalled says what to do when an answer moved a read no further while
// it is short of its end: fail on a batch too large for a fetch, ask
// again (a broker catching up) a bounded number of times.
func stalled(block *sarama.FetchResponseBlock, topic string, p int32, next, end int64, attempts *int) error {
	if block.Partial || len(block.RecordsSet) > 0 {
		return fmt.Errorf("read %s/%d at offset %d: a record batch larger than %d bytes", topic, p, next, fetchBytes)
	}
	*attempts++
	if *attempts > 20 {
		return fmt.Errorf("read %s/%d: no records at offset %d below offset %d", topic, p, next, end)
	}
	time.Sleep(backoff(*attempts))
	return nil
}

// readCommitted passes every committed record of topic's partition p
// from offset from (sarama.OffsetOldest: the log's start) up to the last
// stable offset on to visit, in offset order, and returns the offset
// after the last one it read.
func readCommitted(ctx context.Context, client sarama.Client, topic string, p int32, from int64, visit func(committedRecord) error) (int64, error) {
	next, end := from, int64(-1)
	// Aborted transactions the answers named, by producer, and the ones
	// open at the batch being read (between their first offset and their
	// abort marker).
	var pending []*sarama.AbortedTransaction
	aborting := map[int64]bool{}
	attempts := 0
	for end < 0 || next < end {
		block, err := fetchAt(ctx, client, topic, p, next, sarama.ReadCommitted)
		if err != nil {
			return next, err
		}
		if next < block.LogStartOffset {
			next = block.LogStartOffset
			if block.HighWaterMarkOffset < 0 {
				continue // compacted or deleted before it
			}
		}
		if end < 0 {
			end = block.LastStableOffset
		}
		pending = append(pending, block.AbortedTransactions...)
		sort.Slice(pending, func(i, j int) bool { return pending[i].FirstOffset < pending[j].FirstOffset })
		moved := false
		for _, rs := range block.RecordsSet {
			b := rs.RecordBatch
			if b == nil {
				continue // a legacy message set: never written by us
			}
			last := b.FirstOffset + int64(b.LastOffsetDelta)
			if last < next {
				continue
			}
			for len(pending) > 0 && pending[0].FirstOffset <= last {
				aborting[pending[0].ProducerID] = true
				pending = pending[1:]
			}
			switch {
			case b.Control:
				if len(b.Records) > 0 && isAbortMarker(b.Records[0].Key) {
					delete(aborting, b.ProducerID)
				}
			case b.IsTransactional && aborting[b.ProducerID]:
				// aborted: a read_committed consumer never sees it
			default:
				for _, r := range b.Records {
					off := b.FirstOffset + r.OffsetDelta
					if off < next || off >= end {
						continue
					}
					if err := visit(committedRecord{Offset: off, Key: r.Key, Value: r.Value}); err != nil {
						return next, err
					}
				}
			}
			next, moved = last+1, true
		}
		if moved {
			attempts = 0
		} else if next < end {
			if err := stalled(block, topic, p, next, end, &attempts); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// readDecided passes on to visit every record of topic's partition p,
// from offset from up to its high watermark when the read began, whose
// fate is known: a record written outside a transaction at once, a
// transaction's records at its commit marker (its abort marker drops
// them); in each producer's order, not in offset order across producers.
// It returns the offset to read from next time: the first record of a
// transaction still open at the high watermark, or the high watermark.
//
// Unlike readCommitted, it reads past the last stable offset: a
// transaction another producer left open (a crashed writer's, until the
// broker times it out) holds that offset back, and every record after
// it, committed or not, with it. A reader whose own producer was just
// fenced knows each of its own transactions' fate up to the high
// watermark: fencing writes their markers before it returns.
func readDecided(ctx context.Context, client sarama.Client, topic string, p int32, from int64, visit func(committedRecord) error) (int64, error) {
	next, end := from, int64(-1)
	open := map[int64][]committedRecord{} // by producer: records without a marker yet
	first := map[int64]int64{}            // by producer: the offset of its first batch still open
	attempts := 0
	for end < 0 || next < end {
		block, err := fetchAt(ctx, client, topic, p, next, sarama.ReadUncommitted)
		if err != nil {
			return next, err
		}
		if next < block.LogStartOffset {
			next = block.LogStartOffset
			if block.HighWaterMarkOffset < 0 {
				continue
			}
		}
		if end < 0 {
			end = block.HighWaterMarkOffset
		}
		moved := false
		for _, rs := range block.RecordsSet {
			b := rs.RecordBatch
			if b == nil {
				continue
			}
			last := b.FirstOffset + int64(b.LastOffsetDelta)
			if last < next {
				continue
			}
			switch {
			case b.Control:
				records := open[b.ProducerID]
				delete(open, b.ProducerID)
				delete(first, b.ProducerID)
				if len(b.Records) == 0 || isAbortMarker(b.Records[0].Key) {
					break
				}
				for _, r := range records {
					if err := visit(r); err != nil {
						return next, err
					}
				}
			case b.IsTransactional:
				if _, ok := first[b.ProducerID]; !ok {
					first[b.ProducerID] = b.FirstOffset
				}
				for _, r := range b.Records {
					if off := b.FirstOffset + r.OffsetDelta; off >= next {
						open[b.ProducerID] = append(open[b.ProducerID], committedRecord{Offset: off, Key: r.Key, Value: r.Value})
					}
				}
			default:
				for _, r := range b.Records {
					if off := b.FirstOffset + r.OffsetDelta; off >= next {
						if err := visit(committedRecord{Offset: off, Key: r.Key, Value: r.Value}); err != nil {
							return next, err
						}
					}
				}
			}
			next, moved = last+1, true
		}
		if moved {
			attempts = 0
		} else if next < end {
			if err := stalled(block, topic, p, next, end, &attempts); err != nil {
				return next, err
			}
		}
	}
	for _, off := range first {
		next = min(next, off)
	}
	return next, nil
}

// isAbortMarker says whether a control record's key is an abort marker
// (version int16, type int16: 0 abort, 1 commit).
func isAbortMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 0
}
