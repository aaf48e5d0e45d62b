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
// began, and then returns: the progress records at a resume, and verify.
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
		if err := ctx.Err(); err != nil {
			return next, err
		}
		leader, err := client.Leader(topic, p)
		if err != nil {
			return next, fmt.Errorf("the leader of %s/%d: %w", topic, p, err)
		}
		_ = leader.Open(client.Config())
		req := &sarama.FetchRequest{Version: 4, MaxWaitTime: 50, MinBytes: 1, MaxBytes: fetchBytes, Isolation: sarama.ReadCommitted}
		at := next
		if at < 0 {
			at = 0
		}
		req.AddBlock(topic, p, at, fetchBytes, -1)
		res, err := leader.Fetch(req)
		var block *sarama.FetchResponseBlock
		if err == nil {
			if block = res.GetBlock(topic, p); block == nil {
				err = sarama.ErrIncompleteResponse
			} else if block.Err == sarama.ErrOffsetOutOfRange && next < block.LogStartOffset {
				next, err = block.LogStartOffset, nil // compacted or deleted before it
				continue
			} else if block.Err != sarama.ErrNoError {
				err = block.Err
			}
		}
		if err != nil {
			attempts++
			if attempts > 20 || !IsTransient(err) {
				return next, fmt.Errorf("read %s/%d at offset %d: %w", topic, p, next, err)
			}
			_ = leader.Close()
			_ = client.RefreshMetadata(topic)
			time.Sleep(backoff(attempts))
			continue
		}
		attempts = 0
		if next < 0 {
			next = block.LogStartOffset
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
		if !moved && next < end {
			if block.Partial || len(block.RecordsSet) > 0 {
				return next, fmt.Errorf("read %s/%d at offset %d: a record batch larger than %d bytes", topic, p, next, fetchBytes)
			}
			// Nothing yet below the stable offset (a broker catching up):
			// ask again.
			attempts++
			if attempts > 20 {
				return next, fmt.Errorf("read %s/%d: no records at offset %d below its stable offset %d", topic, p, next, end)
			}
			time.Sleep(backoff(attempts))
		}
	}
	return next, nil
}

// isAbortMarker says whether a control record's key is an abort marker
// (version int16, type int16: 0 abort, 1 commit).
func isAbortMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 0
}
