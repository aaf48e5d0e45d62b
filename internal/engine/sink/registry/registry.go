// Package registry opens the sink a URI names: file://, mem://, s3://,
// gs://, azblob:// (the storage sink), kafka:// and blackhole://. It is the one place that knows
// every sink, so callers name a URI and nothing else.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/blackhole"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Validate parses a sink URI without connecting.
func Validate(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("sink URI %s: %v", redact.URI(uri), redact.ParseError(err))
	}
	switch u.Scheme {
	case "kafka":
		_, err = kafka.ParseURI(uri)
	case "blackhole":
	case "file", "mem", "s3", "gs", "azblob":
		_, err = storage.ParseURI(uri)
	default:
		err = fmt.Errorf("sink URI %s: unknown scheme %q; use kafka://, file://, s3://, gs://, azblob://, mem:// or blackhole://", redact.URI(uri), u.Scheme)
	}
	return err
}

// The storage sinks' node-wide parts, named here so that the node that
// opens sinks names no concrete sink (DESIGN §3: only the registries do).
type (
	// StorageMetrics receives every storage sink's flushes, writes and
	// backlog (seed 004's series).
	StorageMetrics = storage.Metrics
	// StorageBudget bounds the bytes all storage sinks opened with it
	// hold together.
	StorageBudget = storage.Budget
)

// NewStorageBudget returns a budget of max bytes for a node's storage
// sinks.
func NewStorageBudget(max int64) *StorageBudget { return storage.NewBudget(max) }

// StorageFlushReasons are the labels StorageMetrics.FlushTask is given.
func StorageFlushReasons() []string { return append([]string(nil), storage.Reasons...) }

// KafkaProducers hands a closed Kafka sink's producer id to the next
// sink of its changefeed and topic (kafka.Producers).
type KafkaProducers = kafka.Producers

// NewKafkaProducers is a node's hand-over of Kafka producer ids.
func NewKafkaProducers() *KafkaProducers { return kafka.NewProducers() }

// Env is what a sink gets from the node that opens it.
type Env struct {
	Log *slog.Logger
	// StorageMetrics receives the storage sinks' metrics; nil is fine.
	StorageMetrics StorageMetrics
	// KafkaMetrics receives the Kafka sinks' produce requests; nil is
	// fine.
	KafkaMetrics kafka.Metrics
	// KafkaProducers hands a closed Kafka sink's producer id to the next
	// of its changefeed (one per node); nil is fine.
	KafkaProducers *KafkaProducers
	// StorageBudget, if set, bounds the bytes all storage sinks opened
	// with it hold together (one cap per node).
	StorageBudget *StorageBudget
	// FileRoot, if set, is the directory file:// sinks must be under
	// (the agent's --sink-root); one outside is refused.
	FileRoot string
	// Tenure, if set, is asked before every write that cannot be taken
	// back (a data file, a Kafka message): a node that may have lost its
	// session writes nothing more.
	Tenure sink.Tenure
	// Changefeed names the incarnation of the changefeed the sink is
	// opened for (its id and creation time): an exactly-once Kafka sink
	// derives its transactional ids from it, an exactly-once storage
	// sink marks its progress objects with it.
	Changefeed string
	// SpoolDir is where a storage sink's disk spool goes when its URI
	// names no spool-dir ("": the system's temporary directory).
	SpoolDir string
	// StorageNotes, if set, says whether an exactly-once storage sink's
	// flush may leave only notes on its data files (storage.Env.Notes).
	StorageNotes func() bool
}

func (env Env) storage() storage.Env {
	return storage.Env{Metrics: env.StorageMetrics, Budget: env.StorageBudget, Tenure: env.Tenure, SpoolDir: env.SpoolDir, Changefeed: env.Changefeed, Notes: env.StorageNotes}
}

// check validates a URI and holds its local directories under the root.
func check(uri string, env Env) (*url.URL, error) {
	if err := Validate(uri); err != nil {
		return nil, err
	}
	if env.FileRoot != "" {
		if err := storage.CheckRoot(uri, env.FileRoot); err != nil {
			return nil, err
		}
	}
	return url.Parse(uri)
}

// Probe opens a sink and closes it again, to prove that a new
// changefeed's sink can be reached, and returns the URI the changefeed
// keeps: a Kafka sink's with the partitions it hashes keys over pinned
// (kafka.Sink.Pin). A failed probe leaves nothing on the local disk; undo
// removes what one that passed created there (a file:// sink's new
// directory), for a create refused after it.
func Probe(ctx context.Context, uri string, env Env) (pinned string, undo func(), err error) {
	u, err := check(uri, env)
	if err != nil {
		return "", nil, err
	}
	switch u.Scheme {
	case "kafka":
		k, err := kafka.OpenWith(ctx, uri, env.Log, kafka.Env{})
		if err != nil {
			return "", nil, err
		}
		defer k.Close() // it could be reached: that is all a probe asks
		pinned, err := k.Pin(uri)
		if err != nil {
			return "", nil, err
		}
		undo := func() {}
		if k.CreatedTopic() {
			// A create refused after this leaves no topic behind.
			undo = func() {
				if err := kafka.RemoveTopic(uri); err != nil && env.Log != nil {
					env.Log.Warn("kafka: could not remove the topic a refused create made", "sink", redact.URI(uri), "err", err)
				}
			}
		}
		return pinned, undo, nil
	case "blackhole":
		return uri, func() {}, nil
	}
	undo, err = storage.Probe(ctx, uri, env.Log, env.storage())
	return uri, undo, err
}

// Open connects a sink.
func Open(ctx context.Context, uri string, env Env) (sink.Sink, error) {
	log := env.Log
	u, err := check(uri, env)
	if err != nil {
		return nil, err
	}
	var s sink.Sink
	// Each opener returns a typed pointer: a failed open must give back
	// a nil interface, not a nil *Sink in one (which is not == nil, and
	// a caller keeping "the sink it got" then calls a method on nil).
	switch u.Scheme {
	case "kafka":
		k, kerr := kafka.OpenWith(ctx, uri, log, kafka.Env{Tenure: env.Tenure, Metrics: env.KafkaMetrics, Changefeed: env.Changefeed, Producers: env.KafkaProducers})
		s, err = k, kerr
	case "blackhole":
		return blackhole.New(), nil
	default:
		st, serr := storage.OpenWith(ctx, uri, log, env.storage())
		s, err = st, serr
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ReadBack opens what a sink holds for reading back (verify): a storage
// sink's bucket or a Kafka topic. A sink that keeps nothing is refused.
func ReadBack(ctx context.Context, uri string) (codec.ReadBack, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("sink URI %s: %v", redact.URI(uri), redact.ParseError(err))
	}
	switch u.Scheme {
	case "kafka":
		return kafka.OpenReadBack(uri)
	case "file", "mem", "s3", "gs", "azblob":
		return storage.OpenReadBack(ctx, uri)
	}
	return nil, fmt.Errorf("cannot read back a %s:// sink: it keeps nothing to read back (verify reads file://, s3://, gs://, azblob:// and kafka:// sinks)", u.Scheme)
}

// RecoverTimeout is how long a dispatcher of a sink's URI may take to
// recover (seed 002, R10): the Kafka sink's recover-timeout parameter,
// or the default.
func RecoverTimeout(uri string) time.Duration {
	if cfg, err := kafka.ParseURI(uri); err == nil {
		return cfg.RecoverTimeout
	}
	return sink.DefaultRecoverTimeout
}
