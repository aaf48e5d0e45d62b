package kafka

import (
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// Env is what a node gives the Kafka sinks it opens.
type Env struct {
	// Tenure, if set, is asked before a message goes on the wire: a node
	// that may have lost its session sends nothing more.
	Tenure sink.Tenure
	// Metrics receives the producer's requests; nil is fine.
	Metrics Metrics
	// Changefeed names the changefeed: with delivery=exactly-once, each
	// partition's transactional id is made of it and the partition's id.
	Changefeed string
	// Producers, if set, hands a closed sink's producer id to the next
	// sink of its changefeed and topic opened with it (idempotence.go);
	// one per process.
	Producers *Producers
}

// Metrics receives what the sink's producer does, by broker: a handful
// of series per Kafka cluster, none per topic partition or table. Its
// methods must be cheap and must not block.
type Metrics interface {
	// Produce is one produce request to a broker: its bytes, how long
	// its round trip took, and its result: ok, refused (the broker
	// answered with an error for a partition) or failed (no answer: a
	// broken connection, a timeout).
	Produce(broker int32, bytes int, took time.Duration, result string)
}

// Produce results.
const (
	ProduceOK      = "ok"
	ProduceRefused = "refused"
	ProduceFailed  = "failed"
)

type noMetrics struct{}

func (noMetrics) Produce(int32, int, time.Duration, string) {}

// produceResult is a settled call's result, for Metrics.
func (s *Sink) produceResult(c *produceCall) string {
	if c.err != nil || c.res == nil {
		return ProduceFailed
	}
	for _, pid := range c.parts {
		if b := c.res.GetBlock(s.cfg.Topic, pid); b == nil || b.Err != sarama.ErrNoError && b.Err != sarama.ErrDuplicateSequenceNumber {
			return ProduceRefused
		}
	}
	return ProduceOK
}
