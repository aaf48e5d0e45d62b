package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// This file is the progress topic of exactly-once delivery. Every
// transaction of a partition's rows carries one progress record, keyed
// by the partition's transactional id, saying how far the partition's
// rows reached; the record commits with the rows or not at all. A
// partition placed again (after a crash, a move, a recovery) reads its
// last committed record and resumes after it, so nothing committed is
// sent twice. The topic is compacted: only each key's last record
// matters.

// progressRecord is a progress record's value.
type progressRecord struct {
	sink.Position
	Dispatcher string `json:"dispatcher"`
	Epoch      uint64 `json:"epoch"`
}

// progressReads caches, per partition of the progress topic, what was
// read of it: a resume reads only what was written since.
type progressReads struct {
	mu    sync.Mutex
	parts map[int32]*progressPart
}

type progressPart struct {
	mu   sync.Mutex
	next int64 // the offset to read from (sarama.OffsetOldest: the start)
	last map[string]progressRecord
}

func (r *progressReads) part(p int32) *progressPart {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts == nil {
		r.parts = map[int32]*progressPart{}
	}
	pp := r.parts[p]
	if pp == nil {
		pp = &progressPart{next: sarama.OffsetOldest, last: map[string]progressRecord{}}
		r.parts[p] = pp
	}
	return pp
}

// lastProgress is the last committed progress record of a transactional
// id. The writers of the id must be fenced first: then no transaction of
// theirs is open, and what is committed is final, also after a
// transaction of another id that is still open (readDecided).
func (s *Sink) lastProgress(ctx context.Context, id string) (progressRecord, bool, error) {
	p := keyPartition([]byte(id), s.progressParts)
	pp := s.progress.part(p)
	pp.mu.Lock()
	defer pp.mu.Unlock()
	next, err := readDecided(ctx, s.client, s.cfg.progressTopic(), p, pp.next, func(r committedRecord) error {
		var v progressRecord
		if json.Unmarshal(r.Value, &v) != nil {
			return nil // not ours: skip it
		}
		pp.last[string(r.Key)] = v
		return nil
	})
	if err != nil {
		// Not kept: a read cut short had records of transactions still
		// open behind where it stopped, which a read from there would
		// never see committed. The next read starts where this one did
		// (what it visited is visited again, in order: the same result).
		return progressRecord{}, false, fmt.Errorf("read the progress topic %q: %w", s.cfg.progressTopic(), err)
	}
	pp.next = next
	v, ok := pp.last[id]
	return v, ok, nil
}

// ensureProgressTopic makes sure the progress topic exists, compacted.
func ensureProgressTopic(client sarama.Client, cfg Config) (int32, error) {
	topic := cfg.progressTopic()
	parts, err := client.Partitions(topic)
	if err == nil && len(parts) > 0 {
		return int32(len(parts)), nil
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return 0, fmt.Errorf("read the partitions of the progress topic %q: %w", topic, err)
	}
	admin, aerr := sarama.NewClusterAdminFromClient(client)
	if aerr != nil {
		return 0, fmt.Errorf("the progress topic %q does not exist and cannot be created: %w", topic, aerr)
	}
	compact := "compact"
	cerr := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: cfg.ProgressPartitions, ReplicationFactor: cfg.ReplicationFactor,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false)
	if cerr != nil && !errors.Is(cerr, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("the progress topic %q does not exist and could not be created (create it compacted, or name another with progress-topic): %w", topic, cerr)
	}
	if err := client.RefreshMetadata(topic); err != nil {
		return 0, err
	}
	parts, err = client.Partitions(topic)
	if err != nil {
		return 0, err
	}
	return int32(len(parts)), nil
}
