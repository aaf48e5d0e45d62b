package meta

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrPlanNotFound means there is no plan of that id.
var ErrPlanNotFound = errors.New("plan not found")

// SavePlan writes a plan's execution record (a coordinator write): it
// lands only while the term holds and the record is still at
// prevRevision (0: a new plan). It returns the record's new revision.
func (s *Store) SavePlan(ctx context.Context, fence Fence, id string, record any, prevRevision int64) (int64, error) {
	if !fence.valid() {
		return 0, ErrFenced
	}
	key := s.keys.Plan(id)
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", prevRevision)
	tr, err := s.cli.Txn(ctx).If(append(fence.cmps(), cmp)...).Then(clientv3.OpPut(key, mustJSON(record))).Commit()
	if err != nil {
		return 0, fmt.Errorf("save plan %s: %w", id, err)
	}
	if !tr.Succeeded {
		if holds, err := s.fenceHolds(ctx, fence); err != nil {
			return 0, err
		} else if !holds {
			return 0, ErrFenced
		}
		return 0, ErrStale
	}
	return tr.Header.Revision, nil
}

// RequestPlan records an operator's request for a plan (pause, resume,
// cancel); the coordinator's executor reads it. A coordinator write.
func (s *Store) RequestPlan(ctx context.Context, fence Fence, id, request string) error {
	if !fence.valid() {
		return ErrFenced
	}
	exists := clientv3.Compare(clientv3.CreateRevision(s.keys.Plan(id)), ">", 0)
	tr, err := s.cli.Txn(ctx).If(append(fence.cmps(), exists)...).Then(clientv3.OpPut(s.keys.PlanRequest(id), request)).Commit()
	if err != nil {
		return fmt.Errorf("request %s of plan %s: %w", request, id, err)
	}
	if !tr.Succeeded {
		if holds, err := s.fenceHolds(ctx, fence); err != nil {
			return err
		} else if !holds {
			return ErrFenced
		}
		return fmt.Errorf("%w: %s", ErrPlanNotFound, id)
	}
	return nil
}

// ForgetPlanRequest deletes the request for a plan that is over: it has
// been acted on (a cancel ended the plan) or can no longer be. A
// coordinator write.
func (s *Store) ForgetPlanRequest(ctx context.Context, fence Fence, id string) error {
	return s.commit(ctx, fence.cmps(), clientv3.OpDelete(s.keys.PlanRequest(id)))
}

// DeletePlan deletes a finished plan's record and any request for it, if
// the record is still at revision (no one wrote it since it was read). A
// coordinator write.
func (s *Store) DeletePlan(ctx context.Context, fence Fence, id string, revision int64) error {
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(s.keys.Plan(id)), "=", revision))
	return s.commit(ctx, cmps, clientv3.OpDelete(s.keys.Plan(id)), clientv3.OpDelete(s.keys.PlanRequest(id)))
}
