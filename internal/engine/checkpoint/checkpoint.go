// Package checkpoint is seed 003's CheckpointStore: where a partition's
// state (its actor's snapshot) goes between nodes when it is moved or
// split, instead of travelling from node to node.
//
// Two implementations: etcd (the default; states are small: a key range
// and a position, well under etcd's request limit) and a gocloud.dev/blob
// bucket (file://, s3://, gs://, azblob://, mem://) for states too large
// for etcd. An agent picks one with --checkpoint-store.
//
// It imports model, engine/actor, engine/bucket, engine/meta and
// gocloud.dev/blob.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"gocloud.dev/gcerrors"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Store keeps partition states.
type Store interface {
	// Save stores the state of a partition as of a placement (epoch).
	Save(ctx context.Context, cf model.ChangefeedID, pid string, epoch uint64, state []byte) error
	// Load returns it; ErrNotFound if there is none.
	Load(ctx context.Context, cf model.ChangefeedID, pid string) (state []byte, epoch uint64, err error)
	// Forget deletes every state saved for a changefeed (it was removed).
	Forget(ctx context.Context, cf model.ChangefeedID) error
	Close() error
}

// ErrNotFound: no state saved for the partition.
var ErrNotFound = errors.New("no saved partition state")

// LoadActor restores a partition's saved state into its replication
// actor.
func LoadActor(ctx context.Context, s Store, cf model.ChangefeedID, pid string) (*actor.Replication, error) {
	state, _, err := s.Load(ctx, cf, pid)
	if err != nil {
		return nil, err
	}
	a := &actor.Replication{}
	if err := a.Restore(state); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", cf, pid, err)
	}
	return a, nil
}

// Etcd keeps states in etcd, beside the cluster's metadata.
type Etcd struct{ Store *meta.Store }

func (e Etcd) Save(ctx context.Context, cf model.ChangefeedID, pid string, epoch uint64, state []byte) error {
	return e.Store.SaveCheckpoint(ctx, cf, pid, epoch, state)
}

func (e Etcd) Load(ctx context.Context, cf model.ChangefeedID, pid string) ([]byte, uint64, error) {
	state, epoch, ok, err := e.Store.LoadCheckpoint(ctx, cf, pid)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s/%s", ErrNotFound, cf, pid)
	}
	return state, epoch, err
}

// Forget implements Store. Removing a changefeed already deletes its
// states in etcd, in the same transaction; this is for a store used on
// its own.
func (e Etcd) Forget(ctx context.Context, cf model.ChangefeedID) error {
	return e.Store.ForgetCheckpoints(ctx, cf)
}

func (Etcd) Close() error { return nil }

// Blob keeps states as objects <cluster>/<cf>/<pid>.json in a bucket.
type Blob struct {
	bucket  *bucket.Bucket
	cluster string
}

// OpenBlob opens a bucket URL for a cluster's partition states.
func OpenBlob(ctx context.Context, bucketURL, cluster string) (*Blob, error) {
	b, err := bucket.Open(ctx, bucketURL)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-store: %w; give a bucket URL every agent can reach (file:///dir, s3://bucket?region=..., gs://bucket, mem://) and check its name and credentials", err)
	}
	return &Blob{bucket: b, cluster: cluster}, nil
}

type blobRecord struct {
	Epoch uint64 `json:"epoch"`
	State []byte `json:"state"`
}

func (b *Blob) key(cf model.ChangefeedID, pid string) string {
	return b.Prefix(cf) + pid + ".json"
}

func (b *Blob) Save(ctx context.Context, cf model.ChangefeedID, pid string, epoch uint64, state []byte) error {
	body, err := json.Marshal(blobRecord{Epoch: epoch, State: state})
	if err != nil {
		return err
	}
	if err := b.bucket.Put(ctx, b.key(cf, pid), [][]byte{body}, false); err != nil {
		return fmt.Errorf("save the state of %s/%s: %w", cf, pid, err)
	}
	return nil
}

func (b *Blob) Load(ctx context.Context, cf model.ChangefeedID, pid string) ([]byte, uint64, error) {
	body, err := b.bucket.ReadAll(ctx, b.key(cf, pid))
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, 0, fmt.Errorf("%w: %s/%s", ErrNotFound, cf, pid)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load the state of %s/%s: %w", cf, pid, err)
	}
	var r blobRecord
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, 0, fmt.Errorf("the state of %s/%s does not decode: %w", cf, pid, err)
	}
	return r.State, r.Epoch, nil
}

// Forget implements Store: it deletes the objects under <cluster>/<cf>/.
func (b *Blob) Forget(ctx context.Context, cf model.ChangefeedID) error {
	prefix := b.Prefix(cf)
	var deleteErr error
	err := b.bucket.Walk(ctx, prefix, func(key string) error {
		if err := b.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			deleteErr = fmt.Errorf("delete %s: %w", key, err)
			return deleteErr
		}
		return nil
	})
	if err != nil && err != deleteErr {
		return fmt.Errorf("list the states under %s: %w", prefix, err)
	}
	return err
}

// Prefix is where a changefeed's states are in the bucket.
func (b *Blob) Prefix(cf model.ChangefeedID) string { return b.cluster + "/" + string(cf) + "/" }

func (b *Blob) Close() error { return b.bucket.Close() }
