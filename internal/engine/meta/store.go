package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// LoadChangefeed reads one changefeed's own records (its definition,
// status, maintainer placement and positions; not its routing table) at
// one revision: what a change of its state compares against, without
// reading the whole cluster (a pause loaded 20,000 partitions' records
// to change one status).
func (s *Store) LoadChangefeed(ctx context.Context, cf model.ChangefeedID) (*State, error) {
	resp, err := s.cli.Get(ctx, s.keys.ChangefeedPrefix(cf), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read changefeed %s from etcd: %w", cf, err)
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
// Revision is etcd's current revision, read linearizably at the cost of
// one key's count: a reader that waits until its watched view reaches it
// sees every write acknowledged before it asked.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.keys.PartitionIDs(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// RequestProgress asks etcd to tell Watch's channels its current
// revision: writes elsewhere in etcd (another cluster id) move the
// revision without an event under this cluster's prefix.
func (s *Store) RequestProgress(ctx context.Context) error {
	// The same metadata as Watch's context: the request goes to that
	// watch stream.
	return s.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
}

func (s *Store) Watch(ctx context.Context, fromRevision int64) clientv3.WatchChan {
	// RequireLeader: behind a partitioned etcd member the watch fails
	// instead of going quiet, and the view reloads elsewhere. The first
	// response says the watch exists (Created): from then on a progress
	// request reaches it.
	return s.cli.Watch(clientv3.WithRequireLeader(ctx), s.keys.Root(), clientv3.WithPrefix(), clientv3.WithRev(fromRevision), clientv3.WithCreatedNotify())
}

// RegisterNode writes a node's info under its lease and its liveness, in
// one transaction that fails if the id is held by a live process.
//
// A process that lost its session and joins again passes the incarnation
// it had (previous); if the liveness record is still that incarnation's,
// its state carries over, so a Draining node stays Draining. A record
// gone with the session (the coordinator removes a departed node's)
// cannot tell: a node that was drained or stopping says so
// (previous.Stopping) and comes back Stopping, so a drained capture whose
// session lapsed does not take work again. Any other record belongs to a
// process that is gone: the new one starts Alive.
func (s *Store) RegisterNode(ctx context.Context, info model.NodeInfo, lease clientv3.LeaseID, previous Previous) error {
	previousIncarnation := previous.Incarnation
	info.Incarnation = int64(lease)
	nodeVal, err := json.Marshal(info)
	if err != nil {
		return err
	}
	key, lkey := s.keys.Node(info.ID), s.keys.Liveness(info.ID)
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := s.cli.Get(ctx, lkey)
		if err != nil {
			return fmt.Errorf("register node %s in etcd: %w", info.ID, err)
		}
		rec := model.LivenessRecord{State: model.LivenessAlive}
		if previousIncarnation != 0 && previous.Stopping {
			rec.State = model.LivenessStopping
		}
		livenessCmp := clientv3.Compare(clientv3.CreateRevision(lkey), "=", 0)
		if len(cur.Kvs) == 1 {
			livenessCmp = clientv3.Compare(clientv3.ModRevision(lkey), "=", cur.Kvs[0].ModRevision)
			var old model.LivenessRecord
			if previousIncarnation != 0 && json.Unmarshal(cur.Kvs[0].Value, &old) == nil && old.Incarnation == previousIncarnation {
				rec.State = old.State
			}
		}
		rec.Incarnation, rec.UpdatedAt = int64(lease), s.now().UTC()
		liveVal, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), livenessCmp).
			Then(clientv3.OpPut(key, string(nodeVal), clientv3.WithLease(lease)), clientv3.OpPut(lkey, string(liveVal))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("register node %s in etcd: %w", info.ID, err)
		}
		if resp.Succeeded {
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			var existing model.NodeInfo
			_ = json.Unmarshal(kvs[0].Value, &existing)
			existing.ID = info.ID
			return &ErrNodeIDInUse{Existing: existing}
		}
		// Only the liveness record moved under us: read it again.
	}
	return fmt.Errorf("register node %s: its liveness record kept changing; try again", info.ID)
}

// Previous is what a process that lost its session knows of the
// incarnation it had: its id (0 for a fresh start) and whether it was
// drained or stopping (Draining or Stopping when last seen).
type Previous struct {
	Incarnation int64
	Stopping    bool
}

// ErrNotOwnRecord means a node tried to change a liveness record that
// belongs to another incarnation of its id.
var ErrNotOwnRecord = errors.New("the liveness record belongs to another incarnation of this node")

// SetLiveness is the coordinator's liveness write: a compare-and-swap that
// checks the transition table and lands only while the fence holds.
//
// It returns the record before the change. Asking for the state the node
// is already in changes nothing and succeeds only while the fence holds,
// so a deposed coordinator never hears "ok".
func (s *Store) SetLiveness(ctx context.Context, id model.NodeID, to model.Liveness, reason model.TransitionReason, fence Fence) (model.LivenessRecord, error) {
	if !fence.valid() {
		return model.LivenessRecord{}, ErrFenced
	}
	return s.setLiveness(ctx, id, to, reason, &fence, 0)
}

// SetOwnLiveness is a node changing its own liveness (graceful stop): the
// record must belong to the node's current incarnation.
func (s *Store) SetOwnLiveness(ctx context.Context, id model.NodeID, incarnation int64, to model.Liveness) (model.LivenessRecord, error) {
	return s.setLiveness(ctx, id, to, model.ReasonNormal, nil, incarnation)
}

func (s *Store) setLiveness(ctx context.Context, id model.NodeID, to model.Liveness, reason model.TransitionReason, fence *Fence, incarnation int64) (model.LivenessRecord, error) {
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
			return model.LivenessRecord{}, fmt.Errorf("liveness record of %s is unreadable (written by a newer agent?): %w", id, err)
		}
		if incarnation != 0 && cur.Incarnation != incarnation {
			return cur, fmt.Errorf("%s: %w", id, ErrNotOwnRecord)
		}
		if cur.State == to {
			if fence != nil {
				if holds, err := s.fenceHolds(ctx, *fence); err != nil {
					return cur, err
				} else if !holds {
					return cur, ErrFenced
				}
			}
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
			cmps = append(cmps, fence.cmps()...)
		}
		ops := []clientv3.Op{clientv3.OpPut(key, string(val))}
		if !to.MayCampaign() {
			// Withdraw the node's candidacy in the same transaction: a
			// node that is no longer Alive must not win an election it
			// queued for before, even for the moment its view lags.
			cand, err := s.candidacies(ctx, id)
			if err != nil {
				return cur, err
			}
			for _, k := range cand {
				ops = append(ops, clientv3.OpDelete(k))
			}
		}
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return cur, fmt.Errorf("write liveness of %s: %w", id, err)
		}
		if tr.Succeeded {
			return cur, nil
		}
		if fence != nil {
			if holds, err := s.fenceHolds(ctx, *fence); err != nil {
				return cur, err
			} else if !holds {
				return cur, ErrFenced
			}
		}
		// The record changed under us; read it again and re-check the rule.
	}
	return model.LivenessRecord{}, fmt.Errorf("liveness of %s kept changing during the update; try again", id)
}

// candidacies returns the election keys a node holds.
func (s *Store) candidacies(ctx context.Context, id model.NodeID) ([]string, error) {
	resp, err := s.cli.Get(ctx, s.keys.ElectionPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the election: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if model.NodeID(kv.Value) == id {
			out = append(out, string(kv.Key))
		}
	}
	return out, nil
}

// fenceHolds tells whether a term is still current. An error means etcd
// could not say; it is not a verdict.
func (s *Store) fenceHolds(ctx context.Context, f Fence) (bool, error) {
	ops := []clientv3.Op{clientv3.OpGet(f.Key)}
	if f.LivenessKey != "" {
		ops = append(ops, clientv3.OpGet(f.LivenessKey))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("check the coordinator term: %w", err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 || !f.holds(kvs[0].CreateRevision, kvs[0].ModRevision) {
		return false, nil
	}
	if f.LivenessKey != "" {
		lk := resp.Responses[1].GetResponseRange().Kvs
		if len(lk) != 1 || lk[0].ModRevision != f.LivenessRevision {
			return false, nil
		}
	}
	return true, nil
}

// WhyRefused tells a lost term from a stale object: a write that only
// compares says ErrStale either way; when the fence it wrote under no
// longer holds, this returns ErrFenced instead, so the coordinator steps
// down at once rather than retry, refused, until a write that asks why
// says so. Any other error is returned as it is.
func (s *Store) WhyRefused(ctx context.Context, f Fence, err error) error {
	if !errors.Is(err, ErrStale) {
		return err
	}
	if holds, herr := s.fenceHolds(ctx, f); herr == nil && !holds {
		return ErrFenced
	}
	return err
}

// FenceFor completes an election fence with the leader's own liveness
// record, read now. It fails when the leader is not Alive: such a node
// must give the term back instead of leading.
func (s *Store) FenceFor(ctx context.Context, f Fence, self model.NodeID) (Fence, error) {
	key := s.keys.Liveness(self)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Fence{}, fmt.Errorf("read own liveness: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Fence{}, fmt.Errorf("%w: %s", ErrNotRegistered, self)
	}
	var rec model.LivenessRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || !rec.State.MayCampaign() {
		return Fence{}, fmt.Errorf("%s won the election but is %s; giving the term back", self, rec.State)
	}
	f.LivenessKey, f.LivenessRevision = key, resp.Kvs[0].ModRevision
	return f, nil
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
	cmps := append(fence.cmps(),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Node(id)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(lkey), "=", livenessRevision))
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(lkey)).Commit()
	if err != nil {
		return false, fmt.Errorf("delete liveness of %s: %w", id, err)
	}
	if !tr.Succeeded {
		holds, err := s.fenceHolds(ctx, fence)
		if err != nil {
			return false, err
		}
		if !holds {
			return false, ErrFenced
		}
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
	node, ok := st.Nodes[self]
	if !ok {
		return false, nil
	}
	l, ok := st.Liveness[self]
	if !ok || l.Record.State != model.LivenessDraining || l.Record.Incarnation != node.Info.Incarnation {
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
		// Still registered as the incarnation that was read...
		clientv3.Compare(clientv3.ModRevision(s.keys.Node(self)), "=", st.Nodes[self].Revision),
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

// ErrStaleEpoch means an election backend outside etcd tried to raise the
// term to an epoch not above the highest one raised before: a newer
// leader was elected meanwhile.
var ErrStaleEpoch = errors.New("a newer coordinator term was raised in etcd")

// RaiseTerm starts a term won in a backend outside etcd (the MySQL lock)
// with that backend's epoch: the term key names self, on self's lease (it
// goes when self's session does), and the highest epoch raised is kept,
// so that no leader of an older epoch, however late it wakes, raises the
// term again. The returned fence compares the term key's mod-revision:
// the next leader's raise changes it, and this term's writes fail.
func (s *Store) RaiseTerm(ctx context.Context, epoch uint64, self model.NodeID, lease clientv3.LeaseID) (Fence, error) {
	maxKey, termKey := s.keys.ElectionTermMax(), s.keys.ElectionTerm()
	for {
		resp, err := s.cli.Get(ctx, maxKey)
		if err != nil {
			return Fence{}, fmt.Errorf("read the coordinator term: %w", err)
		}
		var rev int64
		if len(resp.Kvs) == 1 {
			rev = resp.Kvs[0].ModRevision
			if prev, _ := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); prev >= epoch {
				return Fence{}, fmt.Errorf("%w: epoch %d, asked to raise %d", ErrStaleEpoch, prev, epoch)
			}
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(maxKey), "=", rev)).
			Then(clientv3.OpPut(maxKey, strconv.FormatUint(epoch, 10)), clientv3.OpPut(termKey, string(self), clientv3.WithLease(lease))).Commit()
		if err != nil {
			return Fence{}, fmt.Errorf("raise the coordinator term: %w", err)
		}
		if tr.Succeeded {
			return Fence{Key: termKey, ModRevision: tr.Header.Revision}, nil
		}
	}
}

// EndTerm deletes the term key if it is still this fence's (a leader
// stepping down), so that nobody reads it as the coordinator.
func (s *Store) EndTerm(ctx context.Context, f Fence) error {
	_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(f.Key), "=", f.ModRevision)).Then(clientv3.OpDelete(f.Key)).Commit()
	return err
}
