package meta

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// RequestMove begins an operator's move of a partition to target (seed
// 003's migration, step 2): Draining; pin keeps it there afterwards (the
// balance scheduler leaves it). A coordinator write.
func (s *Store) RequestMove(ctx context.Context, fence Fence, r RouteRecord, target model.NodeID, pin bool, now time.Time) error {
	if !fence.valid() {
		return ErrFenced
	}
	next := r.Route
	next.Status, next.Target, next.Pinned, next.BusySince, next.SplitKey = model.PartitionDraining, target, pin, now, ""
	key := s.keys.Partition(next.Changefeed, next.ID)
	return s.casPut(ctx, key, next, append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision))...)
}

// StartMove marks a partition Draining towards a target (seed 003's
// migration, step 1). Its node keeps it until it reports a final position.
func (s *Store) StartMove(ctx context.Context, mf MaintainerFence, r RouteRecord, target model.NodeID) error {
	next := r.Route
	// A scheduler's move ends an operator's placement.
	next.Status, next.Target, next.Pinned, next.BusySince = model.PartitionDraining, target, false, time.Now().UTC()
	key := s.keys.Partition(next.Changefeed, next.ID)
	return s.casPut(ctx, key, next, mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision))
}

// The routing table has one regular writer, the changefeed's maintainer.
// An operator's move or split begins with one coordinator write (the
// entry goes Draining, with where to or where to cut); the maintainer
// carries it through. Both compare the entry's revision, so neither can
// overwrite what the other wrote since it read.
