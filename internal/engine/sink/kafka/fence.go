package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// This file keeps a dispatcher's rows in order through Kafka faults (seed
// 002's order kept). The producer retries a partition's messages in order
// for as long as it retries them; the danger is the moment it gives up on
// one: a message behind it in the same partition may still land, and the
// replay from the dispatcher's checkpoint then writes the failed row after
// a newer version of its key. So a dispatcher is fenced the moment one of
// its messages fails: every message of it still inside the producer is
// refused when the producer next tries to send it (its Encode fails, so
// it never goes out), and the dispatcher's successor starts only once
// they have all settled (the dispatcher's Run waits for that).
//
// The moment of giving up is ours, not the producer's: a message retried
// for longer than the retry timeout is refused at its next attempt, in the
// producer's own goroutine, before anything behind it can be sent. The
// producer's retry limit is set far beyond that, so it does not give up
// first. Errors the producer returns on its own fence the dispatcher only
// when they reach the sink, with batches behind the failed message
// already built: order.go keeps those from holding a newer change of a
// row whose older change failed.

// fence is the delivery state of one dispatcher (one epoch).
type fence struct {
	closed atomic.Bool
	// tenure, if set, is the node's hold on its partitions: a message is
	// not sent once it may be lost (a node frozen past its lease).
	tenure sink.Tenure
	mu     sync.Mutex
	err    error // the first failure
	// forgotten: the dispatcher is gone; the fence goes when its last
	// message settles.
	forgotten bool
}

// cause is the first failure (err if none yet): refused messages and
// batches report it, so a permanent error stays permanent.
func (f *fence) cause(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	return err
}

// shut fences the dispatcher; it returns true for the first failure.
func (f *fence) shut(err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.err == nil
	if first {
		f.err = err
	}
	f.closed.Store(true)
	return first
}

// errFenced is the error of a message refused because an earlier message
// of its dispatcher failed.
var errFenced = errors.New("not sent: an earlier message of its dispatcher failed")

// errRetriedTooLong is the error of a message retried past the retry
// timeout.
type errRetriedTooLong struct{ after time.Duration }

func (e errRetriedTooLong) Error() string {
	return fmt.Sprintf("Kafka did not accept the message within the retry timeout (%s); a broker or partition leader is unavailable", e.after.Round(time.Millisecond))
}

// payload is a message's value: its encoding, and the check that the
// producer may (still) send it.
type payload struct {
	b     []byte
	f     *fence
	limit time.Duration
	first atomic.Int64 // unix nanoseconds of the first attempt
}

// Encode implements sarama.Encoder. The producer calls it once per
// attempt to send the message, in its own goroutine, before the messages
// behind it in the partition: refusing here keeps them out too.
func (p *payload) Encode() ([]byte, error) {
	if p.f.closed.Load() {
		return nil, errFenced
	}
	if t := p.f.tenure; t != nil && !t.Valid() {
		// Waits at most until the lease's end, and only while a renewal
		// is late.
		if err := t.Hold(context.Background()); err != nil {
			p.f.shut(err)
			return nil, err
		}
	}
	now := time.Now().UnixNano()
	if !p.first.CompareAndSwap(0, now) {
		if d := time.Duration(now - p.first.Load()); d > p.limit {
			err := errRetriedTooLong{after: d}
			p.f.shut(err)
			return nil, err
		}
	}
	return p.b, nil
}

// Length implements sarama.Encoder.
func (p *payload) Length() int { return len(p.b) }

// permanentErrors need an operator: a message too large, a topic that
// does not exist, a refusal to authorize, a record or configuration the
// broker will never take. Every other error (a leader moving, too few
// in-sync replicas, a connection dropped by a broker restarting, a
// timeout) is transient: recovering the dispatcher is the remedy, and a
// recovery that never ends becomes a changefeed restart, never a hang.
var permanentErrors = []error{
	sarama.ErrMessageSizeTooLarge, sarama.ErrMessageTooLarge, sarama.ErrUnknownTopicOrPartition,
	sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed, sarama.ErrSASLAuthenticationFailed,
	sarama.ErrInvalidTopic, sarama.ErrInvalidRecord, sarama.ErrPolicyViolation,
	sarama.ErrInvalidRequiredAcks, sarama.ErrUnsupportedVersion, sarama.ErrUnsupportedForMessageFormat,
	sarama.ErrInvalidConfig, sarama.ErrTransactionalIDAuthorizationFailed,
}

// IsTransient reports whether a delivery error is worth a retry.
func IsTransient(err error) bool {
	var ce sarama.ConfigurationError
	if errors.As(err, &ce) {
		return false // the producer refused the message itself (too large)
	}
	for _, p := range permanentErrors {
		if errors.Is(err, p) {
			return false
		}
	}
	return true
}

// hint says what an operator does about a permanent delivery error.
func hint(err error, cfg Config) string {
	var ce sarama.ConfigurationError
	tooLarge := errors.As(err, &ce) && strings.Contains(string(ce), "larger than")
	switch {
	case tooLarge, errors.Is(err, sarama.ErrMessageSizeTooLarge), errors.Is(err, sarama.ErrMessageTooLarge):
		return fmt.Sprintf("a row's message is larger than the sink allows (max-message-bytes=%d): raise max-message-bytes in the sink URI and the topic's max.message.bytes, then run `cdcctl changefeed resume`", cfg.MaxMessageBytes)
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return fmt.Sprintf("topic %q does not exist: create it (or let the broker auto-create topics), then run `cdcctl changefeed resume`", cfg.Topic)
	case errors.Is(err, sarama.ErrTopicAuthorizationFailed), errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		return fmt.Sprintf("the broker refuses writes to topic %q: grant this client WRITE on it, then run `cdcctl changefeed resume`", cfg.Topic)
	}
	return "fix the cause named in the error, then run `cdcctl changefeed resume`"
}

func (f *fence) forget() {
	f.mu.Lock()
	f.forgotten = true
	f.mu.Unlock()
}

func (f *fence) isForgotten() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forgotten
}
