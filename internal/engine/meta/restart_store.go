package meta

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// RequestRestart asks one incarnation of a capture to restart (a
// rollout's step). A coordinator write, made only while that incarnation
// is still the registered one: a request for a process already gone would
// otherwise wait for a process that never reads it.
func (s *Store) RequestRestart(ctx context.Context, fence Fence, req model.RestartRequest) error {
	if !fence.valid() {
		return ErrFenced
	}
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.LeaseValue(s.keys.Node(req.Node)), "=", clientv3.LeaseID(req.Incarnation)))
	return s.commit(ctx, cmps, clientv3.OpPut(s.keys.Restart(req.Node), mustJSON(req)))
}

// ForgetRestart deletes a capture's restart request once it has come
// back (or its rollout ended). A coordinator write.
func (s *Store) ForgetRestart(ctx context.Context, fence Fence, id model.NodeID) error {
	return s.commit(ctx, fence.cmps(), clientv3.OpDelete(s.keys.Restart(id)))
}
