// Package kafka is the Kafka sink: its own producer on sarama's client
// and broker connections (producer.go), canal-json
// messages, key-hash partitioning (every version of a key goes to one
// partition, so per-key order holds). Every message carries its
// dispatcher and epoch as metadata, so a failure is attributed to the
// dispatcher that sent it (seed 002, R1) instead of failing the whole
// changefeed.
//
// It imports model, engine/row, redact, sink and sink/codec.
package kafka

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Config is a kafka:// sink URI.
type Config struct {
	Brokers []string
	Topic   string
	// PartitionBy is "key" (default: hash of table and key) or "table".
	PartitionBy string
	// PartitionNum and ReplicationFactor are used when the topic must be
	// created.
	PartitionNum      int32
	ReplicationFactor int16
	// HashPartitions is how many of the topic's partitions rows are
	// hashed over (partitions 0 to HashPartitions-1); 0: all the topic
	// has when the sink opens. A changefeed's create sets it to the
	// topic's count (Pin), so partitions added to the topic later do not
	// move keys to other partitions at the next restart or move.
	HashPartitions  int32
	MaxMessageBytes int
	// BufferMemory bounds the bytes of messages the sink holds (handed
	// over and not yet acknowledged): above it Write waits, so a slow or
	// failing broker makes dispatchers wait instead of memory grow
	// (Kafka's own producers call it buffer.memory).
	BufferMemory int
	Schema       string
	DialTimeout  time.Duration
	// RetryTimeout is how long a message may be retried by the producer
	// (a broker answering with a retriable error, or not at all) before
	// its dispatcher gives up and is recovered from its checkpoint.
	RetryTimeout time.Duration
	// RecoverTimeout bounds a dispatcher's recovery (seed 002, R10): if
	// the dispatcher does not run healthy again within it, the
	// changefeed restarts on that node.
	RecoverTimeout time.Duration
	// Connections is how many connections to a broker carry the batches
	// of the partitions it leads (a partition has one batch on the wire
	// at a time, on one of them): a request is encoded and sent on one
	// while the broker works on another's.
	Connections int
	// Security is SASL and TLS (security.go).
	Security Security
	// Delivery is DeliveryAtLeastOnce (default) or DeliveryExactlyOnce:
	// each partition's rows then go in Kafka transactions, with a
	// progress record of where they reached (txn.go).
	Delivery string
	// ProgressTopic holds the progress records of exactly-once delivery
	// ("": the topic's name with -progress after it), compacted, with
	// ProgressPartitions partitions when it must be created.
	ProgressTopic      string
	ProgressPartitions int32
	// TransactionMeta writes source transactions' boundaries: each row
	// carries its transaction's id and place, and each transaction's
	// BEGIN and END records go to TransactionTopic ("": the topic's name
	// with -transaction after it; one partition when it must be created).
	TransactionMeta  bool
	TransactionTopic string
	// TransactionTimeout is how long the broker lets one of our
	// transactions stay open before it aborts it.
	TransactionTimeout time.Duration
}

// The deliveries a Kafka sink offers.
const (
	DeliveryAtLeastOnce = "at-least-once"
	DeliveryExactlyOnce = "exactly-once"
)

// ExactlyOnce says whether rows go in transactions.
func (c Config) ExactlyOnce() bool { return c.Delivery == DeliveryExactlyOnce }

// progressTopic is the topic of the progress records.
func (c Config) transactionTopic() string {
	if c.TransactionTopic != "" {
		return c.TransactionTopic
	}
	return c.Topic + "-transaction"
}

func (c Config) progressTopic() string {
	if c.ProgressTopic != "" {
		return c.ProgressTopic
	}
	return c.Topic + "-progress"
}

// HashPartitionsOption names the parameter HashPartitions comes from.
const HashPartitionsOption = "hash-partitions"

// ChangeableOptions are the parameters a paused changefeed's Kafka sink
// may change (changefeed update --sink-option): timeouts, memory and
// credentials, not the topic's shape nor how rows are routed to its
// partitions (a key's order across the change would break) — but for
// hash-partitions: setting it to the count a changefeed created before
// it hashes over keeps every key where it is after partitions were added
// to the topic (docs/cli.md says what another value does). The
// delivery may change: a paused changefeed's checkpoints are exact, so
// it resumes where it stopped either way.
var ChangeableOptions = []string{HashPartitionsOption, "max-message-bytes", "buffer-memory", "connections-per-broker", "dial-timeout", "retry-timeout", "recover-timeout", "delivery", "transaction-timeout", sink.TransactionMetaOption, "sasl-user", "sasl-password", "sasl-mechanism", "enable-tls", "ca", "cert", "key", "insecure-skip-verify"}

// FixedOptions are the Kafka sink's other parameters: known, but they
// cannot change on a changefeed.
var FixedOptions = []string{"protocol", "partition", "partition-num", "replication-factor", "progress-topic", "progress-partitions", "transaction-topic"}

// Defaults of the URI's parameters.
var Defaults = Config{PartitionBy: "key", PartitionNum: 3, ReplicationFactor: 1, MaxMessageBytes: 1 << 20, BufferMemory: 64 << 20, Connections: 4, Schema: "gen", DialTimeout: 5 * time.Second,
	RetryTimeout: 3 * time.Second, RecoverTimeout: 60 * time.Second,
	Delivery: DeliveryAtLeastOnce, ProgressPartitions: 16, TransactionTimeout: time.Minute}

// ParseURI parses kafka://host:port[,host:port]/topic?protocol=canal-json&partition=key.
func ParseURI(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("sink URI %s: %v", redact.URI(raw), redact.ParseError(err))
	}
	if u.Scheme != "kafka" {
		return Config{}, fmt.Errorf("sink URI %s: the Kafka sink takes kafka://host:port/topic", redact.URI(raw))
	}
	c := Defaults
	for _, b := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return Config{}, fmt.Errorf("sink URI %s: broker %q is not host:port", redact.URI(raw), b)
		}
		c.Brokers = append(c.Brokers, b)
	}
	c.Topic = strings.Trim(u.Path, "/")
	if c.Topic == "" || strings.Contains(c.Topic, "/") {
		return Config{}, fmt.Errorf("sink URI %s: name one topic, kafka://host:port/topic", redact.URI(raw))
	}
	for key, vs := range u.Query() {
		v := vs[len(vs)-1]
		var perr error
		switch key {
		case "protocol":
			if codec.Protocol(v) != codec.ProtocolCanalJSON {
				perr = fmt.Errorf("unknown protocol: the Kafka sink writes canal-json")
			}
		case "partition":
			if v != "key" && v != "table" {
				perr = fmt.Errorf("use key or table")
			}
			c.PartitionBy = v
		case "partition-num":
			var n int
			n, perr = strconv.Atoi(v)
			if perr == nil && (n < 1 || n > 10000) {
				perr = fmt.Errorf("must be between 1 and 10000")
			}
			c.PartitionNum = int32(n)
		case HashPartitionsOption:
			var n int
			n, perr = strconv.Atoi(v)
			if perr == nil && (n < 1 || n > 10000) {
				perr = fmt.Errorf("must be between 1 and 10000")
			}
			c.HashPartitions = int32(n)
		case "replication-factor":
			var n int
			n, perr = strconv.Atoi(v)
			if perr == nil && (n < 1 || n > 32) {
				perr = fmt.Errorf("must be between 1 and 32")
			}
			c.ReplicationFactor = int16(n)
		case "max-message-bytes":
			c.MaxMessageBytes, perr = byteCount(v, 1024, 64<<20)
		case "buffer-memory":
			c.BufferMemory, perr = byteCount(v, 64<<10, 16<<30)
		case "connections-per-broker":
			var err error
			if c.Connections, err = strconv.Atoi(v); err != nil || c.Connections < 1 || c.Connections > 16 {
				perr = fmt.Errorf("must be a number between 1 and 16")
			}
		case "dial-timeout":
			c.DialTimeout, perr = duration(v, time.Millisecond, time.Hour)
		case "retry-timeout":
			c.RetryTimeout, perr = duration(v, 100*time.Millisecond, time.Hour)
		case "recover-timeout":
			c.RecoverTimeout, perr = duration(v, time.Second, 24*time.Hour)
		case "delivery":
			if v != DeliveryAtLeastOnce && v != DeliveryExactlyOnce {
				perr = fmt.Errorf("use %s (the default) or %s", DeliveryAtLeastOnce, DeliveryExactlyOnce)
			}
			c.Delivery = v
		case sink.TransactionMetaOption:
			c.TransactionMeta, perr = sink.ParseBool(v)
		case "transaction-topic":
			c.TransactionTopic = v
			if v == "" || strings.ContainsAny(v, "/ ") {
				perr = fmt.Errorf("must be a topic name")
			}
		case "progress-topic":
			if v == "" || strings.ContainsAny(v, "/ ") {
				perr = fmt.Errorf("name one topic")
			}
			c.ProgressTopic = v
		case "progress-partitions":
			var n int
			n, perr = strconv.Atoi(v)
			if perr == nil && (n < 1 || n > 1000) {
				perr = fmt.Errorf("must be between 1 and 1000")
			}
			c.ProgressPartitions = int32(n)
		case "transaction-timeout":
			c.TransactionTimeout, perr = duration(v, time.Second, time.Hour)
		default:
			var ok bool
			if ok, perr = c.Security.param(key, v); !ok {
				perr = fmt.Errorf("unknown parameter; the Kafka sink takes protocol, partition, partition-num, hash-partitions, replication-factor, max-message-bytes, buffer-memory, connections-per-broker, dial-timeout, retry-timeout, recover-timeout, delivery, progress-topic, progress-partitions, transaction-timeout, transaction-meta, transaction-topic, sasl-user, sasl-password, sasl-mechanism, enable-tls, ca, cert, key, insecure-skip-verify")
			}
		}
		if perr != nil {
			return Config{}, fmt.Errorf("sink URI: %s=%q: %v", key, redact.Value(key, v), perr)
		}
	}
	if err := c.Security.check(); err != nil {
		return Config{}, fmt.Errorf("sink URI %s: %v", redact.URI(raw), err)
	}
	return c, nil
}

// byteCount parses a size parameter between lo and hi bytes.
func byteCount(v string, lo, hi int) (int, error) {
	n, err := sink.ParseBytes(v, int64(lo), int64(hi))
	return int(n), err
}

// duration parses a duration parameter between lo and hi.
func duration(v string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration; write it like 30s or 2m")
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("must be between %s and %s", lo, hi)
	}
	return d, nil
}
