package kafka

// This file sends a transaction's records (txn.go is the transaction's
// life around it): the rows of its batches, grouped by partition, the
// transaction records of transaction-meta beside them, and the progress
// record of its last batch when it is to commit, each partition added to
// the transaction before its first records go to its leader.

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// send adds the partitions the batches write to the open transaction
// and produces their records (and, when the transaction is to commit,
// the progress record of its last batch).
func (w *txnWriter) send(batches []*txnBatch, added map[int32]bool, commit bool) error {
	s := w.s
	byPart := map[int32][]*record{}
	var order []int32
	for _, b := range batches {
		for _, r := range b.recs {
			if byPart[r.part] == nil {
				order = append(order, r.part)
			}
			byPart[r.part] = append(byPart[r.part], r)
		}
	}
	var progress *record
	progPart := keyPartition([]byte(w.id), s.progressParts)
	if commit {
		last := batches[len(batches)-1]
		v, err := json.Marshal(progressRecord{Position: last.end, Dispatcher: w.dispatcher, Epoch: w.epoch})
		if err != nil {
			return err
		}
		progress = &record{rec: sarama.Record{Key: []byte(w.id), Value: v}, part: progPart, ts: time.Now().Round(0)}
	}
	var side []*record
	for _, b := range batches {
		side = append(side, b.side...)
	}
	var fresh []int32
	for _, p := range order {
		if !added[p] {
			fresh = append(fresh, p)
		}
	}
	// The transaction topic's partition is added once per transaction too,
	// under a key no partition of the topic has.
	freshSide := len(side) > 0 && !added[sideAdded]
	if len(fresh) > 0 || progress != nil || freshSide {
		req := &sarama.AddPartitionsToTxnRequest{Version: 3, TransactionalID: w.id, ProducerID: w.producer, ProducerEpoch: w.pepoch,
			TopicPartitions: map[string][]int32{}}
		if len(fresh) > 0 {
			req.TopicPartitions[s.cfg.Topic] = fresh
		}
		if progress != nil {
			req.TopicPartitions[s.cfg.progressTopic()] = []int32{progPart}
		}
		if freshSide {
			req.TopicPartitions[s.cfg.transactionTopic()] = []int32{txnTopicPartition}
		}
		err := w.coordinatorCall(func(coord *sarama.Broker) error {
			res, err := coord.AddPartitionsToTxn(req)
			if err != nil {
				return err
			}
			for _, errs := range res.Errors {
				for _, pe := range errs {
					if pe.Err != sarama.ErrNoError {
						return pe.Err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("add partitions to the transaction: %w", err)
		}
		for _, p := range fresh {
			added[p] = true
		}
		if freshSide {
			added[sideAdded] = true
		}
	}
	if len(side) > 0 {
		// In the first round: they are few (two per transaction).
		b := recordBatch(side, unnumbered)
		b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.IsTransactional = w.producer, w.pepoch, w.sideSeq, true
		w.sideSeq += int32(len(side))
		if err := w.produce([]txnEntry{{topic: s.cfg.transactionTopic(), part: txnTopicPartition, batch: b, bytes: batchBytes(side)}}); err != nil {
			return err
		}
	}
	// Rounds of at most one record batch per partition, one request per
	// leader, the leaders in parallel.
	for len(order) > 0 || progress != nil {
		var round []txnEntry
		keep := order[:0]
		for _, p := range order {
			recs := byPart[p]
			n, bytes := 0, recordBatchOverhead
			for n < len(recs) && (n == 0 || bytes+recs[n].size() < s.cfg.MaxMessageBytes) {
				bytes += recs[n].size()
				n++
			}
			round = append(round, txnEntry{topic: s.cfg.Topic, part: p, batch: w.transactional(recordBatch(recs[:n], unnumbered), &w.seq, p, n), bytes: bytes})
			if byPart[p] = recs[n:]; len(byPart[p]) > 0 {
				keep = append(keep, p)
			}
		}
		order = keep
		if progress != nil {
			b := recordBatch([]*record{progress}, unnumbered)
			b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.IsTransactional = w.producer, w.pepoch, w.progSeq, true
			w.progSeq++
			round = append(round, txnEntry{topic: s.cfg.progressTopic(), part: progPart, batch: b, bytes: batchBytes([]*record{progress})})
			progress = nil
		}
		if err := w.produce(round); err != nil {
			return err
		}
	}
	return nil
}

// sideAdded is the key of the transaction topic's partition in a
// transaction's map of added partitions.
const sideAdded = -1

// txnEntry is one record batch of a transaction, for one partition.
type txnEntry struct {
	topic string
	part  int32
	batch *sarama.RecordBatch
	bytes int
	err   error // of its last attempt
}

// transactional makes a record batch part of the writer's transaction,
// with the partition's next sequence numbers.
func (w *txnWriter) transactional(b *sarama.RecordBatch, seq *map[int32]int32, p int32, n int) *sarama.RecordBatch {
	b.ProducerID, b.ProducerEpoch, b.IsTransactional = w.producer, w.pepoch, true
	b.FirstSequence = (*seq)[p]
	(*seq)[p] += int32(n)
	return b
}

// produce sends one round's record batches, one request per leader, the
// leaders in parallel. A batch refused for a reason that passes (a
// leader moving, too few in-sync replicas, a dropped connection) is sent
// again, with its same sequence numbers, so the broker keeps it once,
// until retry-timeout, as the at-least-once producer retries; then, or
// at once for any other error (this producer fenced by a newer one, say),
// the transaction fails.
func (w *txnWriter) produce(round []txnEntry) error {
	s := w.s
	deadline := time.Now().Add(s.cfg.RetryTimeout)
	for attempt := 0; ; attempt++ {
		if err := s.hold(s.life); err != nil {
			return err
		}
		calls := map[int32]*produceCall{}
		byCall := map[*produceCall][]*txnEntry{}
		var failed []txnEntry
		for i := range round {
			e := &round[i]
			leader, err := w.leader(e.topic, e.part)
			if err != nil {
				e.err = err
				failed = append(failed, *e)
				continue
			}
			c := calls[leader.ID()]
			if c == nil {
				c = &produceCall{broker: s.txnConn(leader, w.lane), id: leader.ID(), req: s.newRequest()}
				c.req.TransactionalID = &w.id
				calls[leader.ID()] = c
			}
			c.req.AddBatch(e.topic, e.part, e.batch)
			c.bytes += e.bytes
			byCall[c] = append(byCall[c], e)
		}
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.produce(c)
				s.txnConnDone(c, w.lane)
			}()
		}
		wg.Wait()
		for c, es := range byCall {
			for _, e := range es {
				e.err = c.err
				if e.err == nil {
					e.err = blockErr(c.res, e.topic, e.part)
				}
				if e.err != nil {
					failed = append(failed, *e)
				}
			}
		}
		if len(failed) == 0 {
			return nil
		}
		err := failed[0].err
		if !retryInTxn(err) || time.Now().Add(backoff(attempt)).After(deadline) {
			return fmt.Errorf("partition %d of %q: %w", failed[0].part, failed[0].topic, err)
		}
		s.refreshSoon()
		time.Sleep(backoff(attempt))
		round = failed
	}
}

// leader is a partition's leader: the topic's from the refresher's
// lookups, the progress topic's from the client's metadata.
func (w *txnWriter) leader(topic string, p int32) (*sarama.Broker, error) {
	s := w.s
	if topic != s.cfg.Topic {
		return s.client.Leader(topic, p)
	}
	s.mu.Lock()
	leader := s.leaders[p]
	s.mu.Unlock()
	if leader == nil {
		return nil, s.noLeaderErr()
	}
	return leader, nil
}

// retryInTxn says whether a record batch refused with err may be sent
// again in the same transaction: a transient error, unless it says the
// producer's state is gone (fenced, out of sequence).
func retryInTxn(err error) bool {
	for _, e := range []error{sarama.ErrProducerFenced, sarama.ErrInvalidProducerEpoch, sarama.ErrOutOfOrderSequenceNumber,
		sarama.ErrInvalidTxnState, sarama.ErrInvalidProducerIDMapping, sarama.ErrUnknownProducerID} {
		if errors.Is(err, e) {
			return false
		}
	}
	return retryable(err)
}

// blockErr is a produce response's error for one partition.
func blockErr(res *sarama.ProduceResponse, topic string, p int32) error {
	block := res.GetBlock(topic, p)
	switch {
	case block == nil:
		return sarama.ErrIncompleteResponse
	case block.Err != sarama.ErrNoError && block.Err != sarama.ErrDuplicateSequenceNumber:
		return block.Err
	}
	return nil
}

// noLeaderErr is why a partition has no known leader.
func (s *Sink) noLeaderErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noLeader != nil {
		return s.noLeader
	}
	return sarama.ErrLeaderNotAvailable
}
