package kafka

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// This file keeps a dispatcher's rows in order through Kafka faults (seed
// 002's order kept): the moment one of a dispatcher's records fails for
// good, the dispatcher is fenced. Its records still waiting in the sink
// are refused, never sent, and so is every later batch of it, until its
// successor (the next epoch) replays from the checkpoint once they have
// all settled (the dispatcher's Run waits for that). producer.go fences
// before it builds the next batch of the failed record's partition.

// fence is the delivery state of one dispatcher (one epoch).
type fence struct {
	closed atomic.Bool
	mu     sync.Mutex
	err    error // the first failure
	// forgotten: the dispatcher is gone; the fence goes when its last
	// message settles.
	forgotten bool
	// shutAt is when it was closed.
	shutAt time.Time
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
		f.err, f.shutAt = err, time.Now()
	}
	f.closed.Store(true)
	return first
}

// stale says a closed fence may go although its dispatcher was not
// forgotten: it was closed long ago, and a dispatcher that failed stops
// within moments (its loop checks at every batch). Swept sooner, a
// failed dispatcher's batch already under way went out under a new,
// open fence, after the failed one, and its successor's replay put
// older rows after it.
func (f *fence) stale(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forgotten || !f.shutAt.IsZero() && now.Sub(f.shutAt) > staleFence
}

// staleFence is how long a closed fence stays while its dispatcher has
// not been forgotten.
const staleFence = 5 * time.Minute

// errFenced is the error of a message refused because an earlier message
// of its dispatcher failed.
var errFenced = errors.New("not sent: an earlier message of its dispatcher failed")

// errRetriedTooLong is the error of a record retried past the retry
// timeout; it wraps the last attempt's error (a topic that never
// appeared stays permanent).
type errRetriedTooLong struct {
	after time.Duration
	last  error
}

func (e errRetriedTooLong) Error() string {
	return fmt.Sprintf("Kafka did not accept the message within the retry timeout (%s; last: %v); a broker or partition leader is unavailable", e.after.Round(time.Millisecond), e.last)
}

func (e errRetriedTooLong) Unwrap() error { return e.last }

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
	sarama.ErrMessageSetSizeTooLarge, sarama.ErrInvalidTimestamp,
}

// IsTransient reports whether a delivery error is worth a retry.
func IsTransient(err error) bool {
	var ce sarama.ConfigurationError
	if errors.As(err, &ce) {
		return false // the producer refused the message itself (too large)
	}
	var pe sarama.PacketEncodingError
	if errors.As(err, &pe) {
		return false // a request that cannot be encoded fails the same way again
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
	case errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed):
		return "the broker refuses this client's transactions (delivery=exactly-once): grant it WRITE and DESCRIBE on the transactional ids with the prefix cdcctl/, then run `cdcctl changefeed resume`"
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
