package agent

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// kafkaMetrics are the Kafka sinks' produce requests, summed over every
// Kafka sink on this node, by broker (a handful of series per cluster):
// a broker that is slow or refusing shows here before it shows as lag.
type kafkaMetrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newKafkaMetrics(reg *prometheus.Registry) *kafkaMetrics {
	km := &kafkaMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "kafka", Name: "produce_requests_total",
			Help: "Produce requests of the Kafka sinks, by broker id and result: ok, refused (the broker answered with an error for a partition: not leader, not enough replicas, ...) or failed (no answer: a broken connection, a timeout).",
		}, []string{"broker", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "kafka", Name: "produce_bytes_total",
			Help: "Bytes of the messages in the Kafka sinks' produce requests, by broker id (whatever the result).",
		}, []string{"broker"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cdcctl", Subsystem: "kafka", Name: "produce_request_duration_seconds",
			Help:    "Round trip of one produce request of the Kafka sinks (acks=all: until every in-sync replica has the messages), by broker id.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"broker"}),
	}
	reg.MustRegister(km.requests, km.bytes, km.duration)
	return km
}

// Produce implements kafka.Metrics.
func (km *kafkaMetrics) Produce(broker int32, bytes int, took time.Duration, result string) {
	b := strconv.Itoa(int(broker))
	km.requests.WithLabelValues(b, result).Inc()
	km.bytes.WithLabelValues(b).Add(float64(bytes))
	km.duration.WithLabelValues(b).Observe(took.Seconds())
}
