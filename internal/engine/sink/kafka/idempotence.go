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
//   - if the broker surely refused every attempt (an error code that
//     says nothing was appended, or none sent), its sequence numbers go
//     to the partition's next batch: the broker still expects them;
//   - if an attempt may have been appended, or may still be on its way
//     (no answer, a timeout), the epoch it went in is closed: the
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

// producerID asks a broker for an idempotent producer's id and epoch.
// A cluster that gives none (a broker older than Kafka 0.11, or one
// that refuses this client IDEMPOTENT_WRITE, which Kafka before 2.8
// asks for) leaves the sink unnumbered, with a warning: its batches go
// as they did before numbering.
func (s *Sink) producerID() (int64, int16, error) {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff(attempt))
		}
		for _, b := range s.client.Brokers() {
			_ = b.Open(s.sc)
			res, err := b.InitProducerID(&sarama.InitProducerIDRequest{Version: 4, ProducerID: -1, ProducerEpoch: -1,
				// No transaction: the broker does not read it; the Java
				// producer sends the largest.
				TransactionTimeout: math.MaxInt32 * time.Millisecond})
			switch {
			case err != nil:
				_ = b.Close() // dialled again by its next use
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

// stampLocked stamps a partition's next batch of n records: the
// producer's id and epoch, and the partition's next sequence (from 0 in
// an epoch it has not sent in yet). false: no producer id to stamp with
// until the refresher has a new one. s.mu is held.
func (s *Sink) stampLocked(p *partState, n int) (stamp, bool) {
	if s.pidWanted {
		return stamp{}, false
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
			return stamp{}, false
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
	if p.unsure {
		s.closeEpochLocked(st)
	} else if st.pid >= 0 && st.pid == p.seqPID && st.epoch == p.seqEpoch {
		p.next = st.seq // the partition's newest stamp: nothing after it
	}
	p.unsure = false
}

// refusedUnappended: a partition's error code that says the broker
// appended nothing of the batch. Others (REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, NETWORK_EXCEPTION, a storage error)
// leave it unsure.
func refusedUnappended(err error) bool {
	for _, e := range []error{sarama.ErrNotEnoughReplicas, sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable,
		sarama.ErrUnknownTopicOrPartition, sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage, sarama.ErrInvalidRecord,
		sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed, sarama.ErrInvalidRequiredAcks,
		sarama.ErrMessageSetSizeTooLarge, sarama.ErrInvalidTimestamp, sarama.ErrUnsupportedForMessageFormat, sarama.ErrPolicyViolation} {
		if errors.Is(err, e) {
			return true
		}
	}
	return sequenceRefused(err)
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
