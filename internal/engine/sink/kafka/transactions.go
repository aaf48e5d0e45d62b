package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
)

// This file is transaction-meta: the BEGIN and END records of the source
// transactions whose first row a batch's partition holds (sink.Batch.Txns)
// go to the transaction topic, one partition, keyed by the transaction's
// id, as Debezium writes its transaction metadata topic. A batch's flush
// ack waits for them too. With exactly-once delivery they are part of the
// batch's Kafka transaction (txn.go); at least once they are sent beside
// the pump, which serves the data topic only, by sendTxnRecords, one
// batch's after another's of the same dispatcher. The partitions of a
// changefeed write the topic side by side, so transactions whose first
// rows are in different partitions may reach it out of commit order; a
// consumer matches records and rows by id (and orders by commitTs).

// txnTopicPartition is the transaction topic's partition we write.
const txnTopicPartition = 0

// txnRecords are a batch's transactions' records, BEGIN then END for each;
// nil unless the sink writes them.
func (s *Sink) txnRecords(b *sink.Batch) []*record {
	if !s.cfg.TransactionMeta || len(b.Txns) == 0 {
		return nil
	}
	now := time.Now().Round(0)
	out := make([]*record, 0, 2*len(b.Txns))
	for i := range b.Txns {
		e := &b.Txns[i]
		key := codec.TxnKey(e.CommitTs)
		out = append(out,
			&record{rec: sarama.Record{Key: key, Value: codec.AppendTxnRecord(nil, codec.TxnBegin, e)}, part: txnTopicPartition, ts: now},
			&record{rec: sarama.Record{Key: key, Value: codec.AppendTxnRecord(nil, codec.TxnEnd, e)}, part: txnTopicPartition, ts: now})
	}
	return out
}

// sendTxnRecordsFor sends a batch's transaction records at least once,
// beside the pump, and settles the batch's share for them: a failure
// fences the dispatcher as a failed row would (its successor replays
// from the checkpoint, records and rows again). The sink's Close waits
// for it.
// s.mu is held.
func (s *Sink) sendTxnRecordsFor(b *sink.Batch, bs *batchState, recs []*record) {
	// After the dispatcher's earlier batch's records: in its commit order.
	before, mine := s.sideTails[b.Dispatcher], make(chan struct{})
	s.sideTails[b.Dispatcher] = mine
	s.sides.Add(1)
	go func() {
		defer s.sides.Done()
		defer func() {
			s.mu.Lock()
			if s.sideTails[b.Dispatcher] == mine {
				delete(s.sideTails, b.Dispatcher)
			}
			s.mu.Unlock()
			close(mine)
		}()
		if before != nil {
			<-before
		}
		err := s.sendTxnRecords(recs)
		var derr error
		if err != nil {
			s.mu.Lock()
			f := s.fences[b.Dispatcher]
			s.mu.Unlock()
			if f != nil && f.shut(err) {
				s.failures.failed(b.Dispatcher, b.Epoch, IsTransient(err), err)
			}
			derr = s.dispatcherError(b.Dispatcher, b.Epoch, err)
		}
		s.mu.Lock()
		s.releaseLocked(b.Dispatcher, 1)
		s.mu.Unlock()
		bs.settle(1, derr)
	}()
}

// sendTxnRecords writes records to the transaction topic, tried again
// while Kafka refuses them for a reason that passes, for at most
// retry-timeout. The node's hold is asked before every attempt.
func (s *Sink) sendTxnRecords(recs []*record) error {
	topic := s.cfg.transactionTopic()
	deadline := time.Now().Add(s.cfg.RetryTimeout)
	for attempt := 0; ; attempt++ {
		if err := s.hold(s.life); err != nil {
			return err
		}
		leader, err := s.client.Leader(topic, txnTopicPartition)
		if err == nil {
			c := &produceCall{broker: leader, id: leader.ID(), req: s.newRequest(), bytes: batchBytes(recs)}
			c.req.AddBatch(topic, txnTopicPartition, recordBatch(recs, unnumbered))
			s.produce(c)
			if err = c.err; err == nil {
				err = blockErr(c.res, topic, txnTopicPartition)
			}
			if err == nil {
				return nil
			}
		}
		if !IsTransient(err) || time.Now().Add(backoff(attempt)).After(deadline) {
			return fmt.Errorf("write transaction records to %q: %w", topic, err)
		}
		_ = s.client.RefreshMetadata(topic)
		select {
		case <-s.life.Done():
			return errSinkClosed
		case <-time.After(backoff(attempt)):
		}
	}
}

// ensureTransactionTopic creates the transaction topic (one partition)
// if it does not exist.
func ensureTransactionTopic(client sarama.Client, cfg Config) error {
	topic := cfg.transactionTopic()
	parts, err := client.Partitions(topic)
	if err == nil && len(parts) > 0 {
		return nil
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("read the partitions of the transaction topic %q: %w", topic, err)
	}
	admin, aerr := sarama.NewClusterAdminFromClient(client)
	if aerr != nil {
		return fmt.Errorf("the transaction topic %q does not exist and cannot be created: %w", topic, aerr)
	}
	cerr := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: cfg.ReplicationFactor}, false)
	if cerr != nil && !errors.Is(cerr, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("the transaction topic %q does not exist and could not be created (create it, or name another with transaction-topic): %w", topic, cerr)
	}
	return client.RefreshMetadata(topic)
}
