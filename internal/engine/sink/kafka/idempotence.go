package kafka

// This file numbers the batches the producer (producer.go) sends: an
// idempotent producer, as Kafka's own clients are by default.
//
// Why: a produce request the client gave up on (its connection's read
// timed out, or broke) may still have been read by the broker, which
// appends it whenever it gets to it: after the batch's retry, and after
// the batches behind it in its partition, one of which may hold a newer
// change of the same row. Without a producer id the broker cannot tell
// that request is a copy. With one, every batch carries the producer
// id, an epoch and its first sequence number in its partition, and the
// broker appends a partition's batches only in sequence: a copy of a
// batch it has is dropped (DUPLICATE_SEQUENCE_NUMBER, or its first
// offset), one from before the partition's newer epoch is refused
// (INVALID_PRODUCER_EPOCH).
//
// A batch keeps its stamp over its retries, so that its copies are
// known as copies. A batch given up on (failed for good), or changed
// (records of a dispatcher fenced since taken out), drops its stamp:
//   - if the broker surely refused every attempt before appending (an
//     error code it checks first, or a connection never made), its
//     sequence numbers go to the partition's next batch: the broker
//     still expects them;
//   - if an attempt may have been appended, or may still be on its way
//     (no answer, a timeout, an error code sent after the append), or
//     the broker refused its numbers, the epoch it went in is closed: the
//     producer's next batches go in the next epoch, their sequences from
//     0, so that none of its attempts lands after anything sent later.
//     The broker takes a newer epoch starting at sequence 0 from an
//     idempotent producer (KIP-360, Kafka 2.5); the Java producer bumps
//     its own so. Reusing the numbers instead could make the broker take
//     a later batch of the same length for a copy of it, and drop it.
//
// A broker that keeps one epoch per producer rather than per partition
// (kfake does) refuses the batches on the wire in the older epoch once
// one in the newer has landed (INVALID_PRODUCER_EPOCH): not appended,
// they are stamped again in the newer epoch and sent again.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// stamp is what a batch is sent as.
type stamp struct {
	pid   int64 // -1: not numbered (the brokers gave no producer id)
	epoch int16
	seq   int32 // the batch's first record's sequence in its partition
}

// unnumbered is the stamp of every batch of a sink without a producer id.
var unnumbered = stamp{pid: -1, epoch: -1}

// noStamp is the stamp of a batch that could not be stamped (no
// producer id yet): never sent, never taken for another's.
var noStamp = stamp{pid: -2, epoch: -1}

// errNoProducerID is why a batch waits that cannot be stamped.
var errNoProducerID = errors.New("kafka sink: waiting for a new producer id from the brokers (the epochs of the last one ran out)")

// producerID asks a broker for an idempotent producer's id and epoch.
// A cluster that gives none (a broker older than Kafka 0.11, or one
// that refuses this client IDEMPOTENT_WRITE, which Kafka before 2.8
// asks for) leaves the sink unnumbered, with a warning: its batches go
// as they did before numbering.
func (s *Sink) producerID() (int64, int16, error) {
	var last error
	for attempt := 0; attempt < 3 && s.life.Err() == nil; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff(attempt))
		}
		for _, b := range s.client.Brokers() {
			// A connection of its own: the client's are the lanes'
			// (closing one after an error would break a produce on it).
			conn := sarama.NewBroker(b.Addr())
			_ = conn.Open(s.sc)
			res, err := conn.InitProducerID(&sarama.InitProducerIDRequest{Version: 4, ProducerID: -1, ProducerEpoch: -1,
				// No transaction: the broker does not read it; the Java
				// producer sends the largest.
				TransactionTimeout: math.MaxInt32 * time.Millisecond})
			_ = conn.Close()
			switch {
			case err != nil:
				last = err
				continue
			case res.Err != sarama.ErrNoError:
				last = res.Err
				if refusesNumbering(res.Err) {
					return -1, -1, res.Err
				}
				continue
			}
			return res.ProducerID, res.ProducerEpoch, nil
		}
		if errors.Is(last, sarama.ErrUnsupportedVersion) {
			return -1, -1, last
		}
	}
	if last == nil {
		last = sarama.ErrOutOfBrokers
	}
	return 0, 0, fmt.Errorf("ask the brokers for a producer id: %w", last)
}

// refusesNumbering: the cluster will not give this client a producer id
// whatever it does; the sink goes on unnumbered.
func refusesNumbering(err error) bool {
	return errors.Is(err, sarama.ErrClusterAuthorizationFailed) || errors.Is(err, sarama.ErrUnsupportedVersion)
}

// warnUnnumbered says what a sink without a producer id risks, and the fix.
func (s *Sink) warnUnnumbered(err error) {
	s.log.Warn("kafka sink: the brokers give this client no producer id, so its batches go without sequence numbers: a batch the broker takes after the sink gave up waiting for it can land twice, the second time after newer changes of its rows; grant the client IDEMPOTENT_WRITE on the cluster (Kafka before 2.8) or use a broker of Kafka 0.11 or later",
		"topic", s.cfg.Topic, "err", err)
}

// nextBatchLocked is a partition's next batch and its stamp: the batch
// to send again, as it went before, or the oldest records of its queue,
// stamped anew. A batch to send again that lost records of dispatchers
// fenced since, or whose stamp the broker refused, drops its stamp and
// is stamped anew. stamped is false when a batch
// could not be stamped (no producer id until the refresher has a new
// one). s.mu is held.
func (s *Sink) nextBatchLocked(p *partState) (batch []*record, st stamp, fenced []*record, stamped bool) {
	if again := p.again; again != nil {
		kept := again[:0]
		for _, r := range again {
			if f := r.md.fence; f != nil && f.closed.Load() {
				fenced = append(fenced, r)
			} else {
				kept = append(kept, r)
			}
		}
		if len(fenced) == 0 && !p.restamp {
			p.again = nil
			return again, p.sent, nil, true
		}
		s.dropStampLocked(p, p.sent)
		p.again, p.restamp = nil, false
		if len(kept) > 0 {
			st, ok := s.stampLocked(p, len(kept))
			return kept, st, fenced, ok
		}
		// All of it fenced: the queue's next batch instead.
	}
	batch, more := s.takeLocked(p)
	fenced = append(fenced, more...)
	if len(batch) == 0 {
		return nil, noStamp, fenced, true
	}
	st, ok := s.stampLocked(p, len(batch))
	return batch, st, fenced, ok
}

// stampLocked stamps a partition's next batch of n records: the
// producer's id and epoch, and the partition's next sequence (from 0 in
// an epoch it has not sent in yet). false: no producer id to stamp with
// until the refresher has a new one. s.mu is held.
func (s *Sink) stampLocked(p *partState, n int) (stamp, bool) {
	if s.pidWanted {
		return noStamp, false
	}
	if s.pid < 0 {
		return unnumbered, true
	}
	if p.seqPID != s.pid || p.seqEpoch != s.epoch {
		p.seqPID, p.seqEpoch, p.next = s.pid, s.epoch, 0
	}
	if int64(p.next)+int64(n) > math.MaxInt32 {
		// Kafka wraps a sequence past MaxInt32; a new epoch starts the
		// partition at 0 instead, with no wrap to get right.
		s.closeEpochLocked(stamp{pid: s.pid, epoch: s.epoch})
		if s.pidWanted {
			return noStamp, false
		}
		p.seqEpoch, p.next = s.epoch, 0
	}
	st := stamp{pid: s.pid, epoch: s.epoch, seq: p.next}
	p.next += int32(n)
	return st, true
}

// closeEpochLocked makes sure no attempt of a batch stamped st lands
// after anything sent from now on: the next batches go in a newer epoch,
// and a partition that has one refuses the older. Nothing to do when a
// newer epoch has begun since st. s.mu is held.
func (s *Sink) closeEpochLocked(st stamp) {
	if st.pid < 0 || st.pid != s.pid || st.epoch != s.epoch || s.pidWanted {
		return
	}
	if s.epoch == math.MaxInt16 {
		// Epochs run out after 32,767 batches given up on: a new
		// producer id, from the refresher (off the pump: it asks a
		// broker). Unlike a newer epoch it does not make the broker
		// refuse a late copy sent under the old id.
		s.pidWanted = true
		s.refreshSoon()
		return
	}
	s.epoch++
}

// dropStampLocked: the batch stamped st will not be sent again as it
// is. s.mu is held.
func (s *Sink) dropStampLocked(p *partState, st stamp) {
	if p.spent {
		s.closeEpochLocked(st)
	} else if st.pid >= 0 && st.pid == p.seqPID && st.epoch == p.seqEpoch {
		p.next = st.seq // the partition's newest stamp: nothing after it
	}
	p.spent = false
}

// surelyNotAppended: an attempt that failed with callErr (the request's)
// or err (its partition's error code) appended nothing, and never will:
// the connection was never made, or the broker refused the batch with a
// code it checks before appending. Every other error leaves it unsure:
// no answer, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
// NETWORK_EXCEPTION, and NOT_LEADER_OR_FOLLOWER or
// UNKNOWN_TOPIC_OR_PARTITION, which a leader that lost the partition
// sends for a batch it had appended while it waited for its replicas.
func surelyNotAppended(callErr, err error) bool {
	if callErr != nil {
		var op *net.OpError
		return errors.Is(callErr, sarama.ErrNotConnected) || errors.As(callErr, &op) && op.Op == "dial"
	}
	for _, e := range []error{sarama.ErrNotEnoughReplicas, sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage, sarama.ErrInvalidRecord,
		sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed, sarama.ErrInvalidRequiredAcks,
		sarama.ErrMessageSetSizeTooLarge, sarama.ErrInvalidTimestamp, sarama.ErrUnsupportedForMessageFormat, sarama.ErrPolicyViolation} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// renewProducerID gets the producer id closeEpochLocked asked for. It
// runs on the refresher; the pump stamps nothing new until it is done,
// and asks again while it has not succeeded.
func (s *Sink) renewProducerID() {
	s.mu.Lock()
	wanted := s.pidWanted
	s.mu.Unlock()
	if !wanted {
		return
	}
	pid, epoch, err := s.producerID()
	if err != nil && !refusesNumbering(err) {
		s.log.Warn("kafka sink: a new producer id was refused; asking again", "topic", s.cfg.Topic, "err", err)
		return
	}
	if err != nil {
		s.warnUnnumbered(err)
	}
	s.mu.Lock()
	s.pid, s.epoch, s.pidWanted = pid, epoch, false
	s.mu.Unlock()
}

// sequenceRefused: the broker refused a batch for its stamp, without
// appending it: stamped again (in a newer epoch when its own is the
// newest), it is worth another attempt.
func sequenceRefused(err error) bool {
	return errors.Is(err, sarama.ErrOutOfOrderSequenceNumber) || errors.Is(err, sarama.ErrInvalidProducerEpoch) ||
		errors.Is(err, sarama.ErrUnknownProducerID) || errors.Is(err, sarama.ErrInvalidProducerIDMapping)
}

// Producers hands a closed sink's producer id and epoch to the next sink
// of the same changefeed and topic opened in the process, which goes on
// in the next epoch instead of under a new id: the broker then refuses
// a late copy of the closed sink's batches once the new sink has written
// to its partition (a changefeed restarted on its capture after a broker
// that sat on its requests). Under a new id nothing would refuse it. An
// id is held by one sink at a time: taken at open, given back at close.
type Producers struct {
	mu  sync.Mutex
	ids map[string]stamp // epoch: the last one used
}

// NewProducers is an empty hand-over.
func NewProducers() *Producers { return &Producers{ids: map[string]stamp{}} }

// take is key's id and the epoch to go on in, if a closed sink left one
// that has epochs left.
func (p *Producers) take(key string) (int64, int16, bool) {
	if p == nil {
		return 0, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.ids[key]
	delete(p.ids, key)
	if !ok || st.epoch == math.MaxInt16 {
		return 0, 0, false
	}
	return st.pid, st.epoch + 1, true
}

// put keeps a closing sink's id and last epoch for the next.
func (p *Producers) put(key string, pid int64, epoch int16) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids[key] = stamp{pid: pid, epoch: epoch}
}
