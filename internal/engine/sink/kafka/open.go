package kafka

// This file opens the sink: the sarama client and producers its
// configuration asks for, and the topics it writes, created when they
// are missing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/model"
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
		// Only a broker that could not be dialled is worth retrying as
		// it is: a login or TLS refused, or a broker that closed on us
		// (what one does to a client without the TLS it wants), needs a
		// setting fixed.
		refused := loginRefused(err) || !model.DialFailed(err)
		err := fmt.Errorf("cannot reach Kafka at %v: %v; %s", cfg.Brokers, err, connectHint(err, cfg.Security))
		if !refused {
			err = model.Unreachable(err)
		}
		return nil, err
	}
	topicParts, created, err := ensureTopic(client, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	fail := func(err error) (*Sink, error) {
		if created {
			// Refused after it made the topic: nothing is left behind.
			if derr := dropTopic(client, cfg.Topic); derr != nil {
				log.Warn("kafka: could not remove the topic this refused open created", "topic", cfg.Topic, "err", derr)
			}
		}
		client.Close()
		return nil, err
	}
	parts, err := hashedOver(cfg, topicParts)
	if err != nil {
		return fail(err)
	}
	var progressParts int32
	if cfg.ExactlyOnce() {
		if progressParts, err = ensureProgressTopic(client, cfg); err != nil {
			return fail(err)
		}
	}
	if cfg.TransactionMeta {
		if err := ensureTransactionTopic(client, cfg); err != nil {
			return fail(err)
		}
	}
	life, stop := context.WithCancel(context.Background())
	metrics := env.Metrics
	if metrics == nil {
		metrics = noMetrics{}
	}
	s := &Sink{cfg: cfg, createdTopic: created, sc: sc, tenure: env.Tenure, metrics: metrics, client: client, partitions: parts, log: log, failures: newFailureLog(log, failureLogInterval),
		topicParts: topicParts, life: life, stop: stop, outstanding: map[string]int{}, openTxn: map[string]bool{}, fences: map[string]*fence{}, parts: make([]partState, parts), conns: map[lane]*sarama.Broker{}, txnConns: map[lane]*sarama.Broker{},
		kick: make(chan struct{}, 1), results: make(chan *produceCall), refresh: make(chan struct{}, 1), pumped: make(chan struct{}), refreshed: make(chan struct{}),
		changefeed: env.Changefeed, txns: map[string]*txnWriter{}, progressParts: progressParts, sideTails: map[string]chan struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	if cfg.ExactlyOnce() {
		s.failures.exactlyOnce()
	}
	s.producers, s.producersKey = env.Producers, cfg.Topic+"\x00"+strings.Join(cfg.Brokers, ",")+"\x00"+env.Changefeed
	if pid, epoch, ok := s.producers.take(s.producersKey); ok {
		s.pid, s.epoch = pid, epoch
	} else if s.pid, s.epoch, err = s.producerID(); err != nil {
		if !refusesNumbering(err) {
			return fail(model.Unreachable(fmt.Errorf("cannot start a Kafka producer at %v: %w", cfg.Brokers, err)))
		}
		s.warnUnnumbered(err)
	}
	s.lookUpLeaders()
	go s.pump()
	go s.refresher()
	return s, nil
}

// hashedOver is how many partitions rows are hashed over: hash-partitions
// when set (the topic must have that many), else all the topic has.
func hashedOver(cfg Config, topicParts int32) (int32, error) {
	if cfg.HashPartitions == 0 {
		return topicParts, nil
	}
	if topicParts < cfg.HashPartitions {
		return 0, fmt.Errorf("topic %q has %d partitions, fewer than the %d this changefeed hashes its keys over (%s=%d); give the topic its partitions back (kafka-topics.sh --alter --topic %s --partitions %d), or write to another topic with a new changefeed",
			cfg.Topic, topicParts, cfg.HashPartitions, HashPartitionsOption, cfg.HashPartitions, cfg.Topic, cfg.HashPartitions)
	}
	return cfg.HashPartitions, nil
}

// Pin is a sink URI with the partitions its rows are hashed over fixed to
// what the topic has now, unless the URI fixes them already: a create
// keeps it, so that partitions added to the topic later do not send a
// key's next changes to another partition than its earlier ones (a
// consumer reading both could take them out of order) when a capture
// opens the sink again.
func (s *Sink) Pin(uri string) (string, error) {
	if s.cfg.HashPartitions != 0 {
		return uri, nil
	}
	// Appended, so the rest reads as the operator wrote it.
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + HashPartitionsOption + "=" + strconv.Itoa(int(s.partitions)), nil
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

func ensureTopic(client sarama.Client, cfg Config) (n int32, created bool, err error) {
	parts, err := client.Partitions(cfg.Topic)
	if err == nil && len(parts) > 0 {
		return int32(len(parts)), false, nil
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return 0, false, fmt.Errorf("read the partitions of topic %q: %w", cfg.Topic, err)
	}
	admin, aerr := sarama.NewClusterAdminFromClient(client)
	if aerr != nil {
		return 0, false, fmt.Errorf("topic %q does not exist and cannot be created: %w", cfg.Topic, aerr)
	}
	cerr := admin.CreateTopic(cfg.Topic, &sarama.TopicDetail{NumPartitions: cfg.PartitionNum, ReplicationFactor: cfg.ReplicationFactor}, false)
	if cerr != nil && !errors.Is(cerr, sarama.ErrTopicAlreadyExists) {
		return 0, false, fmt.Errorf("topic %q does not exist and could not be created (create it, or fix partition-num/replication-factor): %w", cfg.Topic, cerr)
	}
	created = cerr == nil // not if another made it meanwhile
	if err := client.RefreshMetadata(cfg.Topic); err != nil {
		return 0, created, err
	}
	parts, err = client.Partitions(cfg.Topic)
	if err != nil {
		return 0, created, err
	}
	return int32(len(parts)), created, nil
}

// dropTopic deletes topic through client's brokers.
func dropTopic(client sarama.Client, topic string) error {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return err
	}
	// Not admin.Close: it would close the client, which its caller owns.
	return admin.DeleteTopic(topic)
}

// CreatedTopic says this sink's open created its topic.
func (s *Sink) CreatedTopic() bool { return s.createdTopic }

// RemoveTopic deletes the topic of the sink uri names: a changefeed
// create refused after its probe created the topic leaves none behind.
func RemoveTopic(uri string) error {
	cfg, err := ParseURI(uri)
	if err != nil {
		return err
	}
	sc := saramaConfig(cfg)
	if err := cfg.Security.apply(sc); err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return err
	}
	defer admin.Close()
	return admin.DeleteTopic(cfg.Topic)
}
