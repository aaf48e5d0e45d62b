package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/source"
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
	cfg        Config
	tenure     sink.Tenure // nil: no session to lose
	client     sarama.Client
	producer   sarama.AsyncProducer
	partitions int32
	log        *slog.Logger
	failures   *failureLog

	mu          sync.Mutex
	cond        *sync.Cond
	outstanding map[string]int
	// fences are the delivery states of the dispatchers with messages
	// outstanding or a failure (fence.go).
	fences map[string]*fence
	// inFlight has the rows with a message in the producer, and ready
	// the messages free to go after theirs settled (order.go).
	inFlight map[uint64]*keyQueue
	// acked and ackedMeta are handleResults' scratch space.
	acked     []*sarama.ProducerMessage
	ackedMeta []*meta
	ready     []*sarama.ProducerMessage
	// sendMu is read-held while messages are handed to the producer,
	// and held by Close to stop that.
	sendMu  sync.RWMutex
	kick    chan struct{} // sendReady has work
	closed  bool
	drained bool // Close has seen every result
	sent    chan struct{}
	handled chan struct{}
}

// batchState counts a batch's messages down to its flush ack.
type batchState struct {
	mu        sync.Mutex
	b         *sink.Batch
	remaining int
	done      bool
}

func (bs *batchState) settle(n int, err error) {
	bs.mu.Lock()
	if bs.done {
		bs.mu.Unlock()
		return
	}
	bs.remaining -= n
	finish := err != nil || bs.remaining == 0
	bs.done = finish
	bs.mu.Unlock()
	if finish && bs.b.OnFlushed != nil {
		bs.b.OnFlushed(err)
	}
}

// rowMessage is a row's message with what rides on it, allocated
// together per batch.
type rowMessage struct {
	msg sarama.ProducerMessage
	val payload
	md  meta
}

// meta rides on every message.
type meta struct {
	batch      *batchState
	dispatcher string
	epoch      uint64
	partition  int32      // ≥ 0: this partition (DDL, watermark); -1: by key
	sync       chan error // for messages the caller waits on
	fence      *fence     // the dispatcher's delivery state (rows)
	keys       rowKeys    // its rows (order.go)
	pending    int        // how many of them an earlier message holds; s.mu
}

// Open connects to the brokers and makes sure the topic exists.
func Open(ctx context.Context, uri string, log *slog.Logger) (*Sink, error) {
	return OpenWith(ctx, uri, log, nil)
}

// OpenWith is Open for a node whose tenure is asked before a message
// goes on the wire (nil: never).
func OpenWith(ctx context.Context, uri string, log *slog.Logger, tenure sink.Tenure) (*Sink, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	sc := saramaConfig(cfg)
	if err := cfg.Security.apply(sc); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Kafka at %v: %v; %s", cfg.Brokers, err, connectHint(err, cfg.Security))
	}
	parts, err := ensureTopic(client, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	s := &Sink{cfg: cfg, tenure: tenure, client: client, producer: producer, partitions: parts, log: log, failures: newFailureLog(log, failureLogInterval), outstanding: map[string]int{}, fences: map[string]*fence{}, inFlight: map[uint64]*keyQueue{}, acked: make([]*sarama.ProducerMessage, 0, 512), handled: make(chan struct{}), sent: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.cond = sync.NewCond(&s.mu)
	go s.handleResults()
	go s.sendReady()
	return s, nil
}

func saramaConfig(cfg Config) *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = "cdcctl"
	sc.Version = sarama.V2_8_0_0
	sc.Net.DialTimeout = cfg.DialTimeout
	sc.Net.ReadTimeout = 3 * cfg.DialTimeout
	sc.Net.WriteTimeout = 3 * cfg.DialTimeout
	// One request in flight per broker keeps retries from reordering a key.
	sc.Net.MaxOpenRequests = 1
	sc.Metadata.Retry.Max = 2
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	// The producer retries a partition's messages in order; the sink's
	// retry timeout, not this count, decides when to give up (fence.go).
	// The count only bounds the retry bookkeeping (a slot per level).
	sc.Producer.Retry.Max = 1000
	sc.Producer.Retry.BackoffFunc = func(retries, _ int) time.Duration {
		return min(50*time.Millisecond<<min(retries, 5), time.Second)
	}
	sc.Producer.MaxMessageBytes = cfg.MaxMessageBytes
	sc.Producer.Partitioner = func(string) sarama.Partitioner { return partitioner{} }
	return sc
}

func ensureTopic(client sarama.Client, cfg Config) (int32, error) {
	parts, err := client.Partitions(cfg.Topic)
	if err == nil && len(parts) > 0 {
		return int32(len(parts)), nil
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return 0, fmt.Errorf("read the partitions of topic %q: %w", cfg.Topic, err)
	}
	admin, aerr := sarama.NewClusterAdminFromClient(client)
	if aerr != nil {
		return 0, fmt.Errorf("topic %q does not exist and cannot be created: %w", cfg.Topic, aerr)
	}
	cerr := admin.CreateTopic(cfg.Topic, &sarama.TopicDetail{NumPartitions: cfg.PartitionNum, ReplicationFactor: cfg.ReplicationFactor}, false)
	if cerr != nil && !errors.Is(cerr, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("topic %q does not exist and could not be created (create it, or fix partition-num/replication-factor): %w", cfg.Topic, cerr)
	}
	if err := client.RefreshMetadata(cfg.Topic); err != nil {
		return 0, err
	}
	parts, err = client.Partitions(cfg.Topic)
	if err != nil {
		return 0, err
	}
	return int32(len(parts)), nil
}

// partitioner sends DDLs and watermarks where they are addressed and rows
// by the hash of their key.
type partitioner struct{}

func (partitioner) Partition(msg *sarama.ProducerMessage, n int32) (int32, error) {
	if m, ok := msg.Metadata.(*meta); ok && m.partition >= 0 {
		return m.partition, nil
	}
	if k, ok := msg.Key.(sarama.StringEncoder); ok {
		// The same hash without the copy and the hasher that Encode and
		// hash/fnv allocate for every message.
		h := uint32(2166136261)
		for i := 0; i < len(k); i++ {
			h = (h ^ uint32(k[i])) * 16777619
		}
		return int32(h % uint32(n)), nil
	}
	key, err := msg.Key.Encode()
	if err != nil {
		return 0, err
	}
	h := fnv.New32a()
	h.Write(key)
	return int32(h.Sum32() % uint32(n)), nil
}

func (partitioner) RequiresConsistency() bool { return true }

func (s *Sink) messageKey(e *source.Event) string {
	if s.cfg.PartitionBy == "table" {
		return e.Table
	}
	return e.Table + "/" + e.Key
}

// Write implements sink.Sink: messages are handed to the producer (which
// blocks when its buffer is full); the flush ack comes when Kafka has
// acknowledged every one of them.
func (s *Sink) Write(ctx context.Context, b *sink.Batch) error {
	bs := &batchState{b: b, remaining: len(b.Events)}
	if len(b.Events) == 0 {
		bs.settle(0, nil)
		return nil
	}
	// The fence is taken and the messages counted in one step: a fence
	// is let go only with nothing of its dispatcher outstanding.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSinkClosed
	}
	f := s.fences[b.Dispatcher]
	if f == nil {
		s.sweepFences()
		f = &fence{tenure: s.tenure}
		s.fences[b.Dispatcher] = f
	}
	if f.closed.Load() {
		s.mu.Unlock()
		// An earlier batch failed: nothing more of this dispatcher goes
		// out; its successor replays from the checkpoint.
		bs.settle(len(b.Events), s.dispatcherError(b.Dispatcher, b.Epoch, f.cause(errFenced)))
		return nil
	}
	s.outstanding[b.Dispatcher] += len(b.Events)
	s.mu.Unlock()
	// A row's message and what rides on it are one allocation (per
	// batch), not three per row: the sink must cost little next to the
	// producer (BenchmarkKafkaSink).
	rows := make([]rowMessage, len(b.Events))
	msgs := make([]*sarama.ProducerMessage, len(b.Events))
	var buf bytes.Buffer
	for i := range b.Events {
		e, r := &b.Events[i], &rows[i]
		buf.Reset()
		if err := codec.EncodeRow(&buf, codec.ProtocolCanalJSON, s.cfg.Schema, e); err != nil {
			s.release(b.Dispatcher, len(b.Events))
			// The same row fails the same way again: permanent.
			return &DispatcherError{Dispatcher: b.Dispatcher, Epoch: b.Epoch, Err: fmt.Errorf("encode a row of %s as canal-json: %w", e.Table, err),
				Hint: "the row cannot be written as canal-json; report it with the error, then run `cdcctl changefeed resume` after the fix"}
		}
		r.val = payload{b: bytes.Clone(bytes.TrimRight(buf.Bytes(), "\n")), f: f, limit: s.cfg.RetryTimeout}
		r.md = meta{batch: bs, dispatcher: b.Dispatcher, epoch: b.Epoch, partition: -1, fence: f, keys: orderKeys(e)}
		r.msg = sarama.ProducerMessage{Topic: s.cfg.Topic, Key: sarama.StringEncoder(s.messageKey(e)), Value: &r.val, Metadata: &r.md}
		msgs[i] = &r.msg
	}
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	// Every message takes its rows (order.go) in one step; those whose
	// rows are free go now, the others when sendReady frees them.
	now := make([]bool, len(msgs))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(b.Dispatcher, len(msgs))
		bs.settle(len(msgs), errSinkClosed)
		return errSinkClosed
	}
	for i, m := range msgs {
		now[i] = s.claimKeys(m)
	}
	s.mu.Unlock()
	var cancelled error
	for i, m := range msgs {
		if !now[i] {
			continue
		}
		if f.closed.Load() {
			// A message of this dispatcher failed: nothing behind it
			// goes (settling it passes its rows on).
			s.settle(m, errFenced)
			continue
		}
		select {
		case s.producer.Input() <- m:
		case <-ctx.Done():
			// Nothing of the dispatcher may go out after the gap.
			cancelled = ctx.Err()
			f.shut(cancelled)
			s.settle(m, cancelled)
		}
	}
	return cancelled
}

func (s *Sink) release(dispatcher string, n int) {
	s.mu.Lock()
	s.releaseLocked(dispatcher, n)
	s.mu.Unlock()
}

func (s *Sink) releaseLocked(dispatcher string, n int) {
	s.outstanding[dispatcher] -= n
	if s.outstanding[dispatcher] <= 0 {
		delete(s.outstanding, dispatcher)
		if f := s.fences[dispatcher]; f != nil && (!f.closed.Load() || f.isForgotten()) {
			// Nothing in flight: a new batch makes a new one. A fenced
			// dispatcher keeps its fence (every later batch of it fails)
			// until it is gone.
			delete(s.fences, dispatcher)
		}
		s.cond.Broadcast() // Flush waits for this
	}
}

// handleResults turns the producer's acks into flush acks, and its errors
// into failures of the dispatcher that sent the message.
func (s *Sink) handleResults() {
	defer close(s.handled)
	successes, errs := s.producer.Successes(), s.producer.Errors()
	for successes != nil || errs != nil {
		select {
		case m, ok := <-successes:
			if !ok {
				successes = nil
				continue
			}
			// Acks come in bursts (a produce response acks a batch):
			// settle what is there together, under one lock.
			acked := append(s.acked[:0], m)
		more:
			for len(acked) < cap(s.acked) {
				select {
				case m, ok := <-successes:
					if !ok {
						successes = nil
						break more
					}
					acked = append(acked, m)
				default:
					break more
				}
			}
			s.settleAcked(acked)
			clear(acked)
			s.acked = acked[:0]
		case pe, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.settle(pe.Msg, pe.Err)
		}
	}
}

func (s *Sink) settle(m *sarama.ProducerMessage, err error) {
	md, ok := m.Metadata.(*meta)
	if !ok {
		return
	}
	if md.sync != nil {
		md.sync <- err
		return
	}
	if err != nil {
		if md.fence != nil && md.fence.shut(err) {
			// Once per dispatcher and epoch, not per message, and
			// aggregated per interval (faillog.go).
			s.failures.failed(md.dispatcher, md.epoch, IsTransient(err), err)
		}
		if md.fence != nil && errors.Is(err, errFenced) {
			err = md.fence.cause(err)
		}
		err = s.dispatcherError(md.dispatcher, md.epoch, err)
	}
	// The batch's ack first: Flush returning means every callback ran.
	md.batch.settle(1, err)
	s.mu.Lock()
	// After the fence: the row's next message sees the failure.
	s.passKeys(md)
	s.releaseLocked(md.dispatcher, 1)
	s.mu.Unlock()
}

// settleAcked is settle for messages Kafka acknowledged.
func (s *Sink) settleAcked(ms []*sarama.ProducerMessage) {
	mds := s.ackedMeta[:0]
	for _, m := range ms {
		md, ok := m.Metadata.(*meta)
		if !ok {
			continue
		}
		if md.sync != nil {
			md.sync <- nil
			continue
		}
		// The batch's ack first: Flush returning means every callback ran.
		md.batch.settle(1, nil)
		mds = append(mds, md)
	}
	s.mu.Lock()
	for _, md := range mds {
		s.passKeys(md)
		s.releaseLocked(md.dispatcher, 1)
	}
	s.mu.Unlock()
	clear(mds)
	s.ackedMeta = mds[:0]
}

// dispatcherError classifies a delivery error of a dispatcher.
func (s *Sink) dispatcherError(dispatcher string, epoch uint64, err error) *DispatcherError {
	de := &DispatcherError{Dispatcher: dispatcher, Epoch: epoch, Err: err, Transient: IsTransient(err)}
	if !de.Transient {
		de.Hint = hint(err, s.cfg)
	}
	return de
}

// Forget implements sink.Forgetter: a dispatcher that is gone with
// nothing outstanding needs no fence (the same id may run again, after a
// pause say, and must not inherit a failure).
func (s *Sink) Forget(dispatcher string) {
	s.mu.Lock()
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
	for d, f := range s.fences {
		if f.closed.Load() && s.outstanding[d] <= 0 {
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
	return sink.WaitCond(ctx, s.cond, func() bool { return s.outstanding[dispatcher] <= 0 }, func() error {
		if s.closed {
			return errSinkClosed
		}
		return nil
	})
}

// broadcast sends one message to every partition and waits for the acks.
func (s *Sink) broadcast(ctx context.Context, key string, value []byte) error {
	waits := make([]chan error, s.partitions)
	for p := int32(0); p < s.partitions; p++ {
		waits[p] = make(chan error, 1)
		// Retried no longer than a row: a DDL or watermark to a partition
		// whose broker is down fails after retry-timeout instead of
		// being retried for as long as the producer would (Close waits
		// for every message).
		m := &sarama.ProducerMessage{Topic: s.cfg.Topic, Key: sarama.StringEncoder(key), Value: &payload{b: value, f: &fence{tenure: s.tenure}, limit: s.cfg.RetryTimeout},
			Metadata: &meta{partition: p, sync: waits[p]}}
		select {
		case s.producer.Input() <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
func (s *Sink) WriteDDL(ctx context.Context, ddl source.Event) error {
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

// Close stops the producer; deliveries still pending are failed.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	// Wait out a hand-over in progress; later ones see closed.
	s.sendMu.Lock()
	s.sendMu.Unlock()
	s.producer.AsyncClose()
	<-s.handled
	s.mu.Lock()
	s.drained = true
	s.mu.Unlock()
	s.wake()
	<-s.sent
	s.failures.close()
	return s.client.Close()
}

var _ sink.Sink = (*Sink)(nil)

// errSinkClosed refuses what comes after Close.
var errSinkClosed = errors.New("kafka sink is closed")
