package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// This file is exactly-once delivery (delivery=exactly-once). Each
// partition of a changefeed writes through a transactional producer of
// its own: its transactional id is made of the changefeed and the
// partition's id, the same in every epoch, so the dispatcher that starts
// a partition (on this node or another, after a move, a crash, a
// recovery) fences every earlier one: Kafka bumps the producer epoch,
// aborts the transaction they left open, and refuses their later
// writes. Our routing epochs decide who starts a partition; Kafka's
// producer epochs make the decision hold on the broker.
//
// A dispatcher's batches go in transactions, one at a time: what came
// in while one was being sent goes in the next. A transaction commits
// only at a batch that ends at a position one can resume from (not
// inside a transaction returned in parts, nor inside a snapshot chunk),
// and it carries a progress record of that position (progress.go); the
// batches' flush acks come when it has committed. Any failure aborts the
// open transaction and fails the dispatcher's batches: the dispatcher is
// recovered, and its successor resumes after the last committed
// progress record. Nothing committed is sent again; nothing aborted is
// seen by a read_committed consumer.
//
// Schema changes and watermarks go through the at-least-once producer
// (producer.go): a DDL is written again when a crash comes between it
// and the checkpoint that passes it; consumers apply DDLs idempotently.

// txnBatch is a batch in, or waiting for, a transaction.
type txnBatch struct {
	recs []*record
	// side are its transaction records (transaction-meta), for the
	// transaction topic.
	side   []*record
	size   int
	bs     *batchState
	end    sink.Position
	inside bool
}

// txnWriter is one dispatcher's transactional producer.
type txnWriter struct {
	s          *Sink
	id         string // the transactional id
	dispatcher string
	epoch      uint64
	producer   int64
	pepoch     int16
	lane       int             // which of a broker's connections its requests take (txn_send.go)
	seq        map[int32]int32 // the next sequence number per partition of the topic
	progSeq    int32           // the next of the progress partition
	sideSeq    int32           // the next of the transaction topic's partition

	mu      sync.Mutex
	pending []*txnBatch
	err     error // once set, every batch fails with it
	closed  bool
	kick    chan struct{}
	done    chan struct{}
}

// transactionalID is a partition's transactional id.
func (s *Sink) transactionalID(partition string) string {
	scope := s.changefeed
	if scope == "" {
		scope = "topic:" + s.cfg.Topic
	}
	return "cdcctl/" + scope + "/" + partition
}

// Resume implements sink.Resumer: with exactly-once delivery it fences
// the partition's earlier producers and returns the position of its last
// committed progress record.
func (s *Sink) Resume(ctx context.Context, w sink.Writer) (sink.Position, bool, error) {
	if !s.cfg.ExactlyOnce() {
		return sink.Position{}, false, nil
	}
	id := s.transactionalID(w.Partition)
	producer, pepoch, err := s.initProducer(ctx, id)
	if err != nil {
		return sink.Position{}, false, err
	}
	last, ok, err := s.lastProgress(ctx, id)
	if err != nil {
		return sink.Position{}, false, err
	}
	tw := &txnWriter{s: s, id: id, dispatcher: w.Dispatcher, epoch: w.Epoch, producer: producer, pepoch: pepoch,
		seq: map[int32]int32{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return sink.Position{}, false, errSinkClosed
	}
	old := s.txns[w.Dispatcher]
	s.txns[w.Dispatcher] = tw
	delete(s.openTxn, w.Dispatcher) // a new producer: no transaction yet
	tw.lane = s.txnLanes % s.cfg.Connections
	s.txnLanes++
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	go tw.run()
	return last.Position, ok, nil
}

// hold waits for the node's tenure: a node that may have lost its
// session must neither fence the partition's new owner nor commit.
func (s *Sink) hold(ctx context.Context) error {
	if t := s.tenure; t != nil && !t.Valid() {
		return t.Hold(ctx)
	}
	return nil
}

// coordinatorRetry bounds the retries of a call to the transaction
// coordinator that it answers "not now" (loading, moving, finishing the
// transaction an earlier producer left open).
const coordinatorRetry = 30 * time.Second

// initProducer gets the producer id and epoch of a transactional id,
// fencing its earlier producers.
func (s *Sink) initProducer(ctx context.Context, id string) (int64, int16, error) {
	began := time.Now()
	for attempt := 0; ; attempt++ {
		if err := s.hold(ctx); err != nil {
			return 0, 0, err
		}
		var producer int64
		var pepoch int16
		err := func() error {
			coord, err := s.client.TransactionCoordinator(id)
			if err != nil {
				return err
			}
			_ = coord.Open(s.sc)
			res, err := coord.InitProducerID(&sarama.InitProducerIDRequest{Version: 4, TransactionalID: &id,
				TransactionTimeout: s.cfg.TransactionTimeout, ProducerID: -1, ProducerEpoch: -1})
			if err != nil {
				_ = coord.Close()
				return err
			}
			if res.Err != sarama.ErrNoError {
				return res.Err
			}
			producer, pepoch = res.ProducerID, res.ProducerEpoch
			return nil
		}()
		if err == nil {
			return producer, pepoch, nil
		}
		if !coordinatorBusy(err) && !IsTransient(err) || time.Since(began) > coordinatorRetry {
			return 0, 0, fmt.Errorf("start the transactional producer %q: %w", id, err)
		}
		_ = s.client.RefreshTransactionCoordinator(id)
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(backoff(attempt)):
		}
	}
}

// coordinatorBusy: the coordinator asks to be asked again.
func coordinatorBusy(err error) bool {
	return errors.Is(err, sarama.ErrConcurrentTransactions) || errors.Is(err, sarama.ErrNotCoordinatorForConsumer) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || errors.Is(err, sarama.ErrOffsetsLoadInProgress)
}

// add queues a batch for the writer's next transaction (or fails it at
// once when the writer has failed).
func (w *txnWriter) add(b *txnBatch) {
	w.mu.Lock()
	if err := w.err; err != nil || w.closed {
		w.mu.Unlock()
		if err == nil {
			err = errSinkClosed
		}
		w.s.settleTxn(w, []*txnBatch{b}, err)
		return
	}
	w.pending = append(w.pending, b)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// close ends the writer: what waits fails, an open transaction is
// aborted.
func (w *txnWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	<-w.done
}

// next takes every batch waiting, waiting for one; ok false once closed.
func (w *txnWriter) next() ([]*txnBatch, bool) {
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return nil, false
		}
		if len(w.pending) > 0 {
			out := w.pending
			w.pending = nil
			w.mu.Unlock()
			return out, true
		}
		w.mu.Unlock()
		<-w.kick
	}
}

// run sends the writer's batches in transactions until it is closed or
// fails.
func (w *txnWriter) run() {
	defer close(w.done)
	var open []*txnBatch      // in the open transaction
	added := map[int32]bool{} // partitions of the topic added to it
	for {
		batches, ok := w.next()
		if !ok {
			w.fail(errSinkClosed, open)
			return
		}
		open = append(open, batches...)
		commit := !open[len(open)-1].inside
		err := w.send(batches, added, commit)
		if err == nil && commit {
			err = w.end()
		}
		if err != nil {
			w.fail(err, open)
			return
		}
		if commit {
			w.s.settleTxn(w, open, nil)
			open = nil
			clear(added)
		}
	}
}

// fail aborts the open transaction (if the broker still lets us) and
// fails its batches, those waiting, and every later one with err.
func (w *txnWriter) fail(err error, open []*txnBatch) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	waiting := w.pending
	w.pending = nil
	w.mu.Unlock()
	if errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch) {
		err = producerFenced{id: w.id, err: err}
	} else if len(open) > 0 {
		w.abort()
	}
	if !errors.Is(err, errSinkClosed) {
		w.s.failures.failed(w.dispatcher, w.epoch, IsTransient(err), err)
	}
	w.s.settleTxn(w, append(open, waiting...), err)
}

// abort ends the open transaction without its writes. Best effort: a
// transaction left open is aborted by the next producer of the id, or
// by the broker after transaction-timeout.
func (w *txnWriter) abort() {
	coord, err := w.s.client.TransactionCoordinator(w.id)
	if err != nil {
		return
	}
	_ = coord.Open(w.s.sc)
	_, _ = coord.EndTxn(&sarama.EndTxnRequest{Version: 3, TransactionalID: w.id, ProducerID: w.producer, ProducerEpoch: w.pepoch, TransactionResult: false})
}

// end commits the open transaction.
func (w *txnWriter) end() error {
	return w.coordinatorCall(func(coord *sarama.Broker) error {
		res, err := coord.EndTxn(&sarama.EndTxnRequest{Version: 3, TransactionalID: w.id, ProducerID: w.producer, ProducerEpoch: w.pepoch, TransactionResult: true})
		if err != nil {
			return err
		}
		if res.Err != sarama.ErrNoError {
			return res.Err
		}
		return nil
	})
}

// coordinatorCall makes a call to the transaction coordinator, asking
// again while it answers "not now" (within retry-timeout).
func (w *txnWriter) coordinatorCall(call func(*sarama.Broker) error) error {
	began := time.Now()
	for attempt := 0; ; attempt++ {
		if err := w.s.hold(w.s.life); err != nil {
			return err
		}
		coord, err := w.s.client.TransactionCoordinator(w.id)
		if err == nil {
			_ = coord.Open(w.s.sc)
			var kerr sarama.KError
			if err = call(coord); err != nil && !errors.As(err, &kerr) {
				_ = coord.Close() // no answer: dial again next time
			}
		}
		if err == nil {
			return nil
		}
		if !coordinatorBusy(err) || time.Since(began) > w.s.cfg.RetryTimeout {
			return err
		}
		_ = w.s.client.RefreshTransactionCoordinator(w.id)
		time.Sleep(backoff(attempt))
	}
}

// settleTxn settles a writer's batches: their flush acks, then the
// dispatcher's outstanding count and the buffer.
func (s *Sink) settleTxn(w *txnWriter, batches []*txnBatch, err error) {
	if len(batches) == 0 {
		return
	}
	var derr error
	if err != nil {
		derr = s.dispatcherError(w.dispatcher, w.epoch, err)
	}
	n, size := 0, 0
	for _, b := range batches {
		b.bs.settle(len(b.recs), derr)
		n += len(b.recs)
		size += b.size
	}
	s.mu.Lock()
	s.releaseLocked(w.dispatcher, n)
	s.unbufferLocked(size)
	s.mu.Unlock()
}

// producerFenced is the error of a writer whose producer was fenced: the
// partition was started again (here after a recovery, or on another
// node) and the newer producer's epoch is the only one Kafka takes.
type producerFenced struct {
	id  string
	err error // sarama's error code, whose text names no cause
}

func (e producerFenced) Error() string {
	return fmt.Sprintf("fenced: the partition's transactional producer %q was started again by a newer owner; nothing of this one commits any more", e.id)
}

func (e producerFenced) Unwrap() error { return e.err }
