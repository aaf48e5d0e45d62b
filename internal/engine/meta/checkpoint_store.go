package meta

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// checkpointRecord is a partition's state as the etcd CheckpointStore
// keeps it: the placement (epoch) that saved it, and the actor's bytes.
type checkpointRecord struct {
	Epoch uint64 `json:"epoch"`
	State []byte `json:"state"`
}

// SaveCheckpoint stores a partition's state (seed 003's CheckpointStore,
// etcd implementation: small states). The node that stopped the partition
// writes it; etcd's request limit bounds its size.
func (s *Store) SaveCheckpoint(ctx context.Context, cf model.ChangefeedID, pid string, epoch uint64, state []byte) error {
	if _, err := s.cli.Put(ctx, s.keys.Checkpoint(cf, pid), mustJSON(checkpointRecord{Epoch: epoch, State: state})); err != nil {
		return fmt.Errorf("save the state of %s/%s: %w", cf, pid, err)
	}
	return nil
}

// LoadCheckpoint reads a partition's state; ok is false if there is none.
func (s *Store) LoadCheckpoint(ctx context.Context, cf model.ChangefeedID, pid string) (state []byte, epoch uint64, ok bool, err error) {
	resp, err := s.cli.Get(ctx, s.keys.Checkpoint(cf, pid))
	if err != nil {
		return nil, 0, false, fmt.Errorf("load the state of %s/%s: %w", cf, pid, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, false, nil
	}
	var r checkpointRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, 0, false, fmt.Errorf("the state of %s/%s does not decode: %w", cf, pid, err)
	}
	return r.State, r.Epoch, true, nil
}

// ForgetCheckpoints deletes every partition state of a changefeed.
func (s *Store) ForgetCheckpoints(ctx context.Context, cf model.ChangefeedID) error {
	if _, err := s.cli.Delete(ctx, s.keys.Checkpoint(cf, ""), clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("delete the partition states of %s: %w", cf, err)
	}
	return nil
}
