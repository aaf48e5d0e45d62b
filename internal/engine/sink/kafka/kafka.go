package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// DispatcherError attributes a failed delivery to the dispatcher (and its
// epoch) that sent the message, so only that dispatcher is recovered
// (seed 002, R1).
type DispatcherError struct {
	Dispatcher string
	Epoch      uint64
	Err        error
	// Transient errors (a leader moving, too few in-sync replicas) are
	// expected to pass: recovering the dispatcher is the remedy. Any
	// other error fails the changefeed until an operator fixes it.
	Transient bool
	// Hint says what to do about a permanent error.
	Hint string
}

func (e *DispatcherError) Error() string {
	kind := "permanent"
	if e.Transient {
		kind = "transient"
	}
	return fmt.Sprintf("kafka delivery of dispatcher %s (epoch %d) failed (%s): %v", e.Dispatcher, e.Epoch, kind, e.Err)
}

func (e *DispatcherError) Unwrap() error { return e.Err }

// Permanent implements sink.Classified.
func (e *DispatcherError) Permanent() bool { return !e.Transient }

// Remedy implements sink.Classified.
func (e *DispatcherError) Remedy() string { return e.Hint }

// Sink is the Kafka sink of one changefeed on one node.
type Sink struct {
	cfg Config
	// createdTopic: this open created the topic (it did not exist), so
	// a changefeed create refused after its probe removes it again.
	createdTopic bool
	sc           *sarama.Config
	tenure       sink.Tenure // nil: no session to lose
	metrics      Metrics
	client       sarama.Client
	partitions   int32
	// topicParts is how many partitions the topic had when the sink
	// opened (partitions is how many rows are hashed over: as many, or
	// hash-partitions); the refresher tells when it changes.
	topicParts int32
	log        *slog.Logger
	failures   *failureLog
	// life ends with Close: a wait for the tenure gives up then.
	life context.Context
	stop context.CancelFunc

	mu          sync.Mutex
	cond        *sync.Cond // Flush waits for a dispatcher's outstanding to reach 0
	room        *sync.Cond // Write waits for buffered to fall below cfg.BufferMemory
	outstanding map[string]int
	// buffered is the bytes of records handed over and not yet settled.
	buffered int
	// openTxn are the exactly-once dispatchers whose last batch was
	// inside an upstream transaction: their Kafka transaction stays open,
	// its bytes buffered, until a batch that ends it.
	openTxn map[string]bool
	// fences are the delivery states of the dispatchers with messages
	// outstanding or a failure (fence.go).
	fences map[string]*fence
	// parts are the topic's partitions' queues, and ready the ones the
	// pump should look at (producer.go).
	parts []partState
	ready []int32
	// leaders are the partitions' leaders as the refresher last found
	// them (nil: unknown).
	leaders   []*sarama.Broker
	laneOf    []int         // each partition's lane of its leader's connections
	lanesUsed map[lane]bool // the lanes some partition is on
	noLeader  error         // why a partition without one has none
	// conns are the connections of the lanes after a broker's first
	// (producer.go).
	conns  map[lane]*sarama.Broker
	closed bool
	// The producer's id and epoch its batches are stamped with
	// (idempotence.go; pid -1: unnumbered), and pidWanted while the
	// refresher asks for a new id.
	pid       int64
	epoch     int16
	pidWanted bool
	// producers takes the producer id when the sink closes, under
	// producersKey (nil: none).
	producers    *Producers
	producersKey string

	kick      chan struct{} // the pump has work
	results   chan *produceCall
	refresh   chan struct{}
	pumped    chan struct{}
	refreshed chan struct{}

	// Exactly-once delivery (txn.go): the changefeed, the writers of the
	// dispatchers resumed here, and the progress topic's partitions and
	// what was read of them.
	changefeed    string
	txns          map[string]*txnWriter
	txnLanes      int                     // writers made: the next one's lane
	txnConns      map[lane]*sarama.Broker // the writers' connections after the client's
	progressParts int32
	progress      progressReads

	// sides are the at-least-once sends of transaction records under way
	// (transactions.go); sideTails each dispatcher's last, which its next
	// waits for.
	sides     sync.WaitGroup
	sideTails map[string]chan struct{}
}

// meta is what a record carries besides its bytes.
type meta struct {
	batch      *batchState
	dispatcher string
	epoch      uint64
	sync       chan error // for records the caller waits on (DDL, watermark)
	fence      *fence     // the dispatcher's delivery state (rows)
}

// keyPartition is a row's partition: the FNV-1a hash of its message key
// modulo the partition count (consumers, and rows already in a topic,
// rely on a key staying in its partition).
func keyPartition(key []byte, n int32) int32 {
	h := uint32(2166136261)
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return int32(h % uint32(n))
}

// appendKey appends a row's message key.
func (s *Sink) appendKey(b []byte, e *row.Event) []byte {
	b = append(b, e.Table...)
	if s.cfg.PartitionBy == "table" {
		return b
	}
	return append(append(b, '/'), e.Key...)
}

// Write implements sink.Sink: the batch's records are queued for their
// partitions (Write waits while the sink holds buffer-memory bytes); the
// flush ack comes when Kafka has acknowledged every one of them.
func (s *Sink) Write(ctx context.Context, b *sink.Batch) error {
	side := s.txnRecords(b)
	bs := &batchState{b: b, remaining: len(b.Events)}
	if len(side) > 0 && !s.cfg.ExactlyOnce() {
		// Sent beside the rows (transactions.go): one more to settle.
		bs.remaining++
	}
	if len(b.Events) == 0 && len(side) == 0 {
		bs.settle(0, nil)
		return nil
	}
	// Every value and key of the batch in one buffer each, and its
	// records in one slice: the sink must cost little next to a bare
	// producer (BenchmarkKafkaSink).
	recs := make([]record, len(b.Events))
	ends := make([]int, len(b.Events))
	var vals bytes.Buffer
	var keys []byte
	for i := range b.Events {
		e := &b.Events[i]
		if err := codec.EncodeRow(&vals, codec.ProtocolCanalJSON, s.cfg.Schema, e); err != nil {
			// The same row fails the same way again: permanent.
			return &DispatcherError{Dispatcher: b.Dispatcher, Epoch: b.Epoch, Err: fmt.Errorf("encode a row of %s as canal-json: %w", e.Table, err),
				Hint: "the row cannot be written as canal-json; report it with the error, then run `cdcctl changefeed resume` after the fix"}
		}
		if v := vals.Bytes(); len(v) > 0 && v[len(v)-1] == '\n' {
			vals.Truncate(len(v) - 1)
		}
		ends[i] = vals.Len()
		keys = s.appendKey(keys, e)
		recs[i].part = int32(len(keys)) // the key's end, until below
	}
	// Wall time only: the batch's timestamps are deltas of wall times.
	now := time.Now().Round(0)
	v, start, kstart, size := vals.Bytes(), 0, 0, 0
	var tooLarge error
	for i := range recs {
		r := &recs[i]
		kend := int(r.part)
		r.rec.Key, r.rec.Value = keys[kstart:kend:kend], v[start:ends[i]:ends[i]]
		r.part = keyPartition(r.rec.Key, s.partitions)
		r.ts = now
		start, kstart = ends[i], kend
		if n := r.size(); n > s.cfg.MaxMessageBytes && tooLarge == nil {
			tooLarge = sarama.ConfigurationError(fmt.Sprintf("Attempt to produce message larger than configured Producer.MaxMessageBytes: %d > %d", n, s.cfg.MaxMessageBytes))
		}
		size += r.size()
	}

	s.mu.Lock()
	// A dispatcher whose transaction is open (exactly once) does not
	// wait for room: its own buffered bytes are given back only when a
	// batch of its ends the transaction, this one or a later one, and an
	// upstream transaction larger than buffer-memory held every writer
	// of the sink for good. It goes over by that transaction.
	if s.buffered >= s.cfg.BufferMemory && !s.openTxn[b.Dispatcher] {
		err := sink.WaitCond(ctx, s.room, func() bool { return s.buffered < s.cfg.BufferMemory }, s.closedErr)
		if err != nil {
			s.mu.Unlock()
			return err
		}
	}
	if s.closed {
		s.mu.Unlock()
		return errSinkClosed
	}
	if s.cfg.ExactlyOnce() {
		return s.writeTxn(b, bs, recs, side, size, tooLarge)
	}
	f := s.fences[b.Dispatcher]
	if f == nil {
		s.sweepFences()
		f = &fence{}
		s.fences[b.Dispatcher] = f
	}
	if f.closed.Load() || tooLarge != nil {
		s.mu.Unlock()
		// An earlier batch failed: nothing more of this dispatcher goes
		// out; its successor replays from the checkpoint. A row too
		// large fails the same way each time: its dispatcher stops here.
		err := f.cause(errFenced)
		if tooLarge != nil && f.shut(tooLarge) {
			err = tooLarge
			s.failures.failed(b.Dispatcher, b.Epoch, false, err)
		}
		bs.settle(len(b.Events), s.dispatcherError(b.Dispatcher, b.Epoch, err))
		return nil
	}
	s.outstanding[b.Dispatcher] += len(recs)
	s.buffered += size
	md := &meta{batch: bs, dispatcher: b.Dispatcher, epoch: b.Epoch, fence: f}
	for i := range recs {
		r := &recs[i]
		r.md = md
		p := &s.parts[r.part]
		p.queue = append(p.queue, r)
		s.listLocked(r.part)
	}
	if len(side) > 0 {
		s.outstanding[b.Dispatcher]++
		s.sendTxnRecordsFor(b, bs, side)
	}
	s.mu.Unlock()
	s.wake()
	return nil
}

func (s *Sink) closedErr() error {
	if s.closed {
		return errSinkClosed
	}
	return nil
}

// dispatcherError classifies a delivery error of a dispatcher.
func (s *Sink) dispatcherError(dispatcher string, epoch uint64, err error) *DispatcherError {
	de := &DispatcherError{Dispatcher: dispatcher, Epoch: epoch, Err: err, Transient: IsTransient(err)}
	if !de.Transient {
		de.Hint = hint(err, s.cfg)
	}
	return de
}

// writeTxn hands a batch to its dispatcher's transactional producer.
// s.mu is held; writeTxn releases it.
func (s *Sink) writeTxn(b *sink.Batch, bs *batchState, recs []record, side []*record, size int, tooLarge error) error {
	w := s.txns[b.Dispatcher]
	if w == nil || tooLarge != nil {
		s.mu.Unlock()
		err := tooLarge
		if err == nil {
			err = fmt.Errorf("dispatcher %s wrote before it resumed: with delivery=exactly-once a partition must be resumed in the sink first", b.Dispatcher)
		}
		bs.settle(len(b.Events), &DispatcherError{Dispatcher: b.Dispatcher, Epoch: b.Epoch, Err: err, Hint: hint(err, s.cfg)})
		return nil
	}
	s.outstanding[b.Dispatcher] += len(recs)
	s.buffered += size
	if b.Inside {
		s.openTxn[b.Dispatcher] = true
	} else {
		delete(s.openTxn, b.Dispatcher)
	}
	md := &meta{batch: bs, dispatcher: b.Dispatcher, epoch: b.Epoch}
	tb := &txnBatch{recs: make([]*record, len(recs)), side: side, size: size, bs: bs, end: b.End, inside: b.Inside}
	for i := range recs {
		recs[i].md = md
		tb.recs[i] = &recs[i]
	}
	s.mu.Unlock()
	w.add(tb)
	return nil
}

// Forget implements sink.Forgetter: a dispatcher that is gone with
// nothing outstanding needs no fence (the same id may run again, after a
// pause say, and must not inherit a failure). Its transactional
// producer, if it has one, ends: a transaction it left open is aborted.
func (s *Sink) Forget(dispatcher string) {
	s.mu.Lock()
	delete(s.openTxn, dispatcher)
	if w := s.txns[dispatcher]; w != nil {
		delete(s.txns, dispatcher)
		s.mu.Unlock()
		w.close()
		s.mu.Lock()
	}
	if s.outstanding[dispatcher] <= 0 {
		delete(s.fences, dispatcher)
	} else if f := s.fences[dispatcher]; f != nil {
		f.forget() // its last message to settle lets it go
	}
	s.mu.Unlock()
}

// maxFences bounds the fences kept of dispatchers that failed; their
// dispatchers are gone long before hundreds more have failed. s.mu is
// held.
const maxFences = 1024

func (s *Sink) sweepFences() {
	if len(s.fences) < maxFences {
		return
	}
	now := time.Now()
	for d, f := range s.fences {
		if f.closed.Load() && s.outstanding[d] <= 0 && f.stale(now) {
			delete(s.fences, d)
		}
	}
}

// RecoverTimeout bounds a dispatcher's recovery (seed 002, R10).
func (s *Sink) RecoverTimeout() time.Duration { return s.cfg.RecoverTimeout }

// Flush implements sink.Sink: it waits until Kafka acknowledged (or
// refused) everything the dispatcher sent.
func (s *Sink) Flush(ctx context.Context, dispatcher string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sink.WaitCond(ctx, s.cond, func() bool { return s.outstanding[dispatcher] <= 0 }, s.closedErr)
}

// broadcast sends one message to every partition and waits for the acks.
// Such a message is retried no longer than a row: a DDL or watermark to
// a partition whose broker is down fails after retry-timeout.
func (s *Sink) broadcast(ctx context.Context, key string, value []byte) error {
	waits := make([]chan error, s.partitions)
	now := time.Now().Round(0)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSinkClosed
	}
	for p := int32(0); p < s.partitions; p++ {
		waits[p] = make(chan error, 1)
		r := &record{rec: sarama.Record{Key: []byte(key), Value: value}, md: &meta{sync: waits[p]}, part: p, ts: now}
		s.buffered += r.size()
		s.parts[p].queue = append(s.parts[p].queue, r)
		s.listLocked(p)
	}
	s.mu.Unlock()
	s.wake()
	for _, w := range waits {
		select {
		case err := <-w:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WriteDDL sends the DDL to every partition (each partition's consumer
// must see it between the rows before and after it) and waits.
func (s *Sink) WriteDDL(ctx context.Context, ddl row.Event) error {
	b, err := codec.EncodeCanalDDL(s.cfg.Schema, &ddl)
	if err != nil {
		return err
	}
	return s.broadcast(ctx, ddl.Table, b)
}

// WriteCheckpoint sends a watermark to every partition.
func (s *Sink) WriteCheckpoint(ctx context.Context, ts model.Ts) error {
	return s.broadcast(ctx, "", codec.EncodeWatermark(ts))
}

// Close stops the sink: what waits is failed, what is on the wire is
// waited for.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.room.Broadcast()
	txns := s.txns
	s.txns = map[string]*txnWriter{}
	s.mu.Unlock()
	for _, w := range txns {
		w.close()
	}
	s.wake()
	s.stop() // a send waiting for the tenure gives up
	<-s.pumped
	// Nothing more is stamped: the next sink goes on in a newer epoch.
	s.mu.Lock()
	if s.pid >= 0 && !s.pidWanted {
		s.producers.put(s.producersKey, s.pid, s.epoch)
	}
	s.mu.Unlock()
	s.sides.Wait()
	s.closeConns(&s.txnConns) // the writers are done
	s.failures.close()
	// A metadata refresh under way is waited for (its network timeouts
	// bound it); none starts after this.
	err := s.client.Close()
	<-s.refreshed
	return err
}

var _ sink.Sink = (*Sink)(nil)

// errSinkClosed refuses what comes after Close.
var errSinkClosed = errors.New("kafka sink is closed")
