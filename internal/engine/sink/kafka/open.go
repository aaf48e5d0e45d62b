package kafka

// This file opens the sink: the sarama client and producers its
// configuration asks for, and the topics it writes, created when they
// are missing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
)

// Open connects to the brokers and makes sure the topic exists.
func Open(ctx context.Context, uri string, log *slog.Logger) (*Sink, error) {
	return OpenWith(ctx, uri, log, Env{})
}

// OpenWith is Open for a node: its tenure is asked before a message goes
// on the wire, its metrics hear of every produce request.
func OpenWith(ctx context.Context, uri string, log *slog.Logger, env Env) (*Sink, error) {
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
	var progressParts int32
	if cfg.ExactlyOnce() {
		if progressParts, err = ensureProgressTopic(client, cfg); err != nil {
			client.Close()
			return nil, err
		}
	}
	if cfg.TransactionMeta {
		if err := ensureTransactionTopic(client, cfg); err != nil {
			client.Close()
			return nil, err
		}
	}
	life, stop := context.WithCancel(context.Background())
	metrics := env.Metrics
	if metrics == nil {
		metrics = noMetrics{}
	}
	s := &Sink{cfg: cfg, sc: sc, tenure: env.Tenure, metrics: metrics, client: client, partitions: parts, log: log, failures: newFailureLog(log, failureLogInterval),
		life: life, stop: stop, outstanding: map[string]int{}, openTxn: map[string]bool{}, fences: map[string]*fence{}, parts: make([]partState, parts), conns: map[lane]*sarama.Broker{}, txnConns: map[lane]*sarama.Broker{},
		kick: make(chan struct{}, 1), results: make(chan *produceCall), refresh: make(chan struct{}, 1), pumped: make(chan struct{}), refreshed: make(chan struct{}),
		changefeed: env.Changefeed, txns: map[string]*txnWriter{}, progressParts: progressParts, sideTails: map[string]chan struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	if cfg.ExactlyOnce() {
		s.failures.exactlyOnce()
	}
	s.lookUpLeaders()
	go s.pump()
	go s.refresher()
	return s, nil
}

func saramaConfig(cfg Config) *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = "cdcctl"
	sc.Version = sarama.V2_8_0_0
	sc.Net.DialTimeout = cfg.DialTimeout
	sc.Net.ReadTimeout = 3 * cfg.DialTimeout
	sc.Net.WriteTimeout = 3 * cfg.DialTimeout
	// The sink's own producer sends one request per connection at a
	// time (producer.go's lanes) by itself, and so do exactly-once
	// writers (txn_send.go): sarama's broker holds its connection from a
	// request until its answer, whatever MaxOpenRequests says, so the
	// writers are spread over connections instead.
	sc.Net.MaxOpenRequests = 1
	sc.Metadata.Retry.Max = 2
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.MaxMessageBytes = cfg.MaxMessageBytes
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
