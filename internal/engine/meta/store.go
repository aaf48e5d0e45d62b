package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrNodeIDInUse means another live process already registered this node id.
type ErrNodeIDInUse struct{ Existing model.NodeInfo }

func (e *ErrNodeIDInUse) Error() string {
	return fmt.Sprintf("node id %q is already registered by pid %d at %s (started %s); stop that process or choose another --node-id",
		e.Existing.ID, e.Existing.PID, e.Existing.Address, e.Existing.StartedAt.Format(time.RFC3339))
}

// ErrNotRegistered means a liveness change was asked for a node that has no record.
var ErrNotRegistered = errors.New("node is not registered in this cluster")

// Store performs typed reads and writes of one cluster's state.
type Store struct {
	cli  *clientv3.Client
	keys Keys
	now  func() time.Time
}

// NewStore returns a store over an etcd client for one cluster.
func NewStore(cli *clientv3.Client, clusterID string) *Store {
	return &Store{cli: cli, keys: NewKeys(clusterID), now: time.Now}
}

// Keys returns the layout the store writes.
func (s *Store) Keys() Keys { return s.keys }

// Client returns the etcd client, for the election backend's session.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Load reads the whole control state at one revision.
func (s *Store) Load(ctx context.Context) (*State, error) {
	resp, err := s.cli.Get(ctx, s.keys.Root(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read cluster state from etcd: %w", err)
	}
	st := newState(s.clusterID())
	st.Revision = resp.Header.Revision
	for _, kv := range resp.Kvs {
		st.apply(s.keys, kv, false)
	}
	return st, nil
}

func (s *Store) clusterID() string {
	// root is "/cdcctl/<id>/"
	r := s.keys.root
	return r[len("/cdcctl/") : len(r)-1]
}

// Watch streams every change under the cluster's root from a revision on.
func (s *Store) Watch(ctx context.Context, fromRevision int64) clientv3.WatchChan {
	return s.cli.Watch(ctx, s.keys.Root(), clientv3.WithPrefix(), clientv3.WithRev(fromRevision))
}

// RegisterNode writes a node's info under its lease and its liveness as
// Alive, in one transaction that fails if the id is held by a live process.
// A liveness record left by a previous incarnation of the same id is
// replaced: that process is gone, and so is its lifecycle.
func (s *Store) RegisterNode(ctx context.Context, info model.NodeInfo, lease clientv3.LeaseID) error {
	info.Incarnation = int64(lease)
	nodeVal, err := json.Marshal(info)
	if err != nil {
		return err
	}
	liveVal, err := json.Marshal(model.LivenessRecord{State: model.LivenessAlive, Incarnation: int64(lease), UpdatedAt: s.now().UTC()})
	if err != nil {
		return err
	}
	key := s.keys.Node(info.ID)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(nodeVal), clientv3.WithLease(lease)),
			clientv3.OpPut(s.keys.Liveness(info.ID), string(liveVal))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("register node %s in etcd: %w", info.ID, err)
	}
	if !resp.Succeeded {
		var existing model.NodeInfo
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			_ = json.Unmarshal(kvs[0].Value, &existing)
		}
		existing.ID = info.ID
		return &ErrNodeIDInUse{Existing: existing}
	}
	return nil
}

// SetLiveness moves a node's liveness by compare-and-swap: it reads the
// record, checks the transition table, and writes only if the record did
// not change in between. A non-nil fence makes it a coordinator write that
// fails with ErrFenced once the term is over; a node changing its own
// liveness (graceful stop, the only-node-left reset) passes nil.
//
// It returns the record before the change. Asking for the state the node is
// already in is a no-op that returns that record and no error, so retries
// are safe.
func (s *Store) SetLiveness(ctx context.Context, id model.NodeID, to model.Liveness, reason model.TransitionReason, fence *Fence) (model.LivenessRecord, error) {
	key := s.keys.Liveness(id)
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return model.LivenessRecord{}, fmt.Errorf("read liveness of %s: %w", id, err)
		}
		if len(resp.Kvs) == 0 {
			return model.LivenessRecord{}, fmt.Errorf("%w: %s", ErrNotRegistered, id)
		}
		var cur model.LivenessRecord
		if err := json.Unmarshal(resp.Kvs[0].Value, &cur); err != nil {
			return model.LivenessRecord{}, fmt.Errorf("liveness record of %s is corrupt: %w", id, err)
		}
		if cur.State == to {
			return cur, nil
		}
		if err := model.CheckTransition(cur.State, to, reason); err != nil {
			return cur, fmt.Errorf("%s: %w", id, err)
		}
		next := cur
		next.State, next.UpdatedAt = to, s.now().UTC()
		val, err := json.Marshal(next)
		if err != nil {
			return cur, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)}
		if fence != nil {
			if !fence.valid() {
				return cur, ErrFenced
			}
			cmps = append(cmps, fence.cmp())
		}
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return cur, fmt.Errorf("write liveness of %s: %w", id, err)
		}
		if tr.Succeeded {
			return cur, nil
		}
		if fence != nil && !s.fenceHolds(ctx, *fence) {
			return cur, ErrFenced
		}
		// The record changed under us; read it again and re-check the rule.
	}
	return model.LivenessRecord{}, fmt.Errorf("liveness of %s kept changing during the update; try again", id)
}

func (s *Store) fenceHolds(ctx context.Context, f Fence) bool {
	resp, err := s.cli.Get(ctx, f.Key)
	return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == f.CreateRevision
}

// DeleteStaleLiveness removes the liveness record of a node whose
// registration is gone (its lease expired or was revoked). It is a
// coordinator write: it lands only while the fence holds, only if the node
// is still unregistered, and only if the record is the one the caller saw.
func (s *Store) DeleteStaleLiveness(ctx context.Context, fence Fence, id model.NodeID, livenessRevision int64) (bool, error) {
	if !fence.valid() {
		return false, ErrFenced
	}
	lkey := s.keys.Liveness(id)
	tr, err := s.cli.Txn(ctx).If(
		fence.cmp(),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Node(id)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(lkey), "=", livenessRevision),
	).Then(clientv3.OpDelete(lkey)).Commit()
	if err != nil {
		return false, fmt.Errorf("delete liveness of %s: %w", id, err)
	}
	if !tr.Succeeded && !s.fenceHolds(ctx, fence) {
		return false, ErrFenced
	}
	return tr.Succeeded, nil
}

// ResetOnlyNodeLeft is seed 000's single exception, done by the node itself
// in one transaction: when it is the only registered node and Draining, its
// liveness returns to Alive and the drain record is cleared without moving
// the node to Stopping. It returns false when the conditions no longer hold.
func (s *Store) ResetOnlyNodeLeft(ctx context.Context, self model.NodeID) (bool, error) {
	st, err := s.Load(ctx)
	if err != nil {
		return false, err
	}
	if len(st.Nodes) != 1 {
		return false, nil
	}
	if _, ok := st.Nodes[self]; !ok {
		return false, nil
	}
	l, ok := st.Liveness[self]
	if !ok || l.Record.State != model.LivenessDraining {
		return false, nil
	}
	if err := model.CheckTransition(l.Record.State, model.LivenessAlive, model.ReasonOnlyNodeLeft); err != nil {
		return false, err
	}
	next := l.Record
	next.State, next.UpdatedAt = model.LivenessAlive, s.now().UTC()
	val, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	// Nobody may have joined since the read: every key under nodes/ must be
	// no newer than the state we decided on (a new key would be).
	tr, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.Liveness(self)), "=", l.Revision),
		clientv3.Compare(clientv3.ModRevision(s.keys.NodesPrefix()), "<", st.Revision+1).WithPrefix(),
	).Then(
		clientv3.OpPut(s.keys.Liveness(self), string(val)),
		clientv3.OpDelete(s.keys.Drain()),
	).Commit()
	if err != nil {
		return false, fmt.Errorf("reset liveness of %s: %w", self, err)
	}
	return tr.Succeeded, nil
}
