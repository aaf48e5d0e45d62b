package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// DrainEpoch is the epoch of the last drain begun (0: none yet).
func (s *Store) DrainEpoch(ctx context.Context) (uint64, error) {
	resp, err := s.cli.Get(ctx, s.keys.Drain()+"-epoch")
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
}

// StartDrain persists a drain record and moves the target to Draining in
// one coordinator transaction (seed 000: persist DrainRecord, then
// liveness; here both or neither). The record's epoch is the next one.
func (s *Store) StartDrain(ctx context.Context, fence Fence, rec model.DrainRecord) (model.DrainRecord, error) {
	if !fence.valid() {
		return rec, ErrFenced
	}
	lkey := s.keys.Liveness(rec.Target)
	cur, err := s.cli.Get(ctx, lkey)
	if err != nil {
		return rec, err
	}
	if len(cur.Kvs) == 0 {
		return rec, fmt.Errorf("%w: %s", ErrNotRegistered, rec.Target)
	}
	var live model.LivenessRecord
	if err := json.Unmarshal(cur.Kvs[0].Value, &live); err != nil {
		return rec, err
	}
	// A capture still Draining without a drain record (its drain was
	// cancelled) is drained again: the new drain takes it over.
	if live.State != model.LivenessDraining {
		if err := model.CheckTransition(live.State, model.LivenessDraining, model.ReasonNormal); err != nil {
			return rec, fmt.Errorf("%s: %w", rec.Target, err)
		}
	}
	// The epoch counts drains over the cluster's life.
	epochs, err := s.cli.Get(ctx, s.keys.Drain()+"-epoch")
	if err != nil {
		return rec, err
	}
	epochCmp := clientv3.Compare(clientv3.CreateRevision(s.keys.Drain()+"-epoch"), "=", 0)
	if len(epochs.Kvs) == 1 {
		last, _ := strconv.ParseUint(string(epochs.Kvs[0].Value), 10, 64)
		rec.Epoch = last + 1
		epochCmp = clientv3.Compare(clientv3.ModRevision(s.keys.Drain()+"-epoch"), "=", epochs.Kvs[0].ModRevision)
	} else {
		rec.Epoch = 1
	}
	live.State, live.UpdatedAt = model.LivenessDraining, s.now().UTC()
	cand, err := s.candidacies(ctx, rec.Target)
	if err != nil {
		return rec, err
	}
	ops := []clientv3.Op{
		clientv3.OpPut(s.keys.Drain(), mustJSON(rec)),
		clientv3.OpPut(s.keys.Drain()+"-epoch", strconv.FormatUint(rec.Epoch, 10)),
		clientv3.OpPut(lkey, mustJSON(live)),
	}
	for _, k := range cand {
		ops = append(ops, clientv3.OpDelete(k))
	}
	cmps := append(fence.cmps(), epochCmp,
		clientv3.Compare(clientv3.CreateRevision(s.keys.Drain()), "=", 0),
		clientv3.Compare(clientv3.ModRevision(lkey), "=", cur.Kvs[0].ModRevision))
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return rec, err
	}
	if !tr.Succeeded {
		if holds, err := s.fenceHolds(ctx, fence); err != nil {
			return rec, err
		} else if !holds {
			return rec, ErrFenced
		}
		if got, err := s.cli.Get(ctx, s.keys.Drain(), clientv3.WithCountOnly()); err == nil && got.Count > 0 {
			return rec, ErrDrainInProgress
		}
		return rec, ErrStale
	}
	return rec, nil
}

// FinishDrain completes a drain: the target goes Stopping (if it is still
// registered and Draining) and the record is cleared, in one coordinator
// transaction.
func (s *Store) FinishDrain(ctx context.Context, fence Fence, st *State) error {
	if st.Drain == nil {
		return nil
	}
	ops := []clientv3.Op{clientv3.OpDelete(s.keys.Drain())}
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(s.keys.Drain()), "=", st.DrainRevision))
	if l, ok := st.Liveness[st.Drain.Target]; ok && l.Record.State == model.LivenessDraining {
		next := l.Record
		next.State, next.UpdatedAt = model.LivenessStopping, s.now().UTC()
		lkey := s.keys.Liveness(st.Drain.Target)
		ops = append(ops, clientv3.OpPut(lkey, mustJSON(next)))
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(lkey), "=", l.Revision))
	}
	return s.commit(ctx, cmps, ops...)
}

// ClearDrain deletes the drain record, leaving the target's liveness as
// it is (a cancelled drain). A coordinator write.
func (s *Store) ClearDrain(ctx context.Context, fence Fence, st *State) error {
	if st.Drain == nil {
		return nil
	}
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(s.keys.Drain()), "=", st.DrainRevision))
	return s.commit(ctx, cmps, clientv3.OpDelete(s.keys.Drain()))
}

// TakeOverDrain gives the drain in progress to a new plan of the same
// target, whose liveness stays Draining: the record's plan ended without
// finishing it (failed: held past its hold timeout, a step that failed),
// and the operator submitted the drain again. It is written only over the
// record st holds, with the next epoch.
func (s *Store) TakeOverDrain(ctx context.Context, fence Fence, st *State, rec model.DrainRecord) (model.DrainRecord, error) {
	if !fence.valid() {
		return rec, ErrFenced
	}
	if st.Drain == nil || st.Drain.Target != rec.Target {
		return rec, ErrStale
	}
	epochs, err := s.cli.Get(ctx, s.keys.Drain()+"-epoch")
	if err != nil {
		return rec, err
	}
	if len(epochs.Kvs) != 1 {
		return rec, ErrStale
	}
	last, _ := strconv.ParseUint(string(epochs.Kvs[0].Value), 10, 64)
	rec.Epoch = last + 1
	cmps := append(fence.cmps(),
		clientv3.Compare(clientv3.ModRevision(s.keys.Drain()), "=", st.DrainRevision),
		clientv3.Compare(clientv3.ModRevision(s.keys.Drain()+"-epoch"), "=", epochs.Kvs[0].ModRevision))
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(s.keys.Drain(), mustJSON(rec)),
		clientv3.OpPut(s.keys.Drain()+"-epoch", strconv.FormatUint(rec.Epoch, 10))).Commit()
	if err != nil {
		return rec, err
	}
	if !tr.Succeeded {
		if holds, err := s.fenceHolds(ctx, fence); err != nil {
			return rec, err
		} else if !holds {
			return rec, ErrFenced
		}
		return rec, ErrStale
	}
	return rec, nil
}

// SetDrainHold sets or clears (hold "") why nothing more may move off the
// drain's target (model.DrainRecord.Hold), over the record st holds.
func (s *Store) SetDrainHold(ctx context.Context, fence Fence, st *State, hold string) error {
	if st.Drain == nil {
		return nil
	}
	rec := *st.Drain
	rec.Hold = hold
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(s.keys.Drain()), "=", st.DrainRevision))
	return s.commit(ctx, cmps, clientv3.OpPut(s.keys.Drain(), mustJSON(rec)))
}
