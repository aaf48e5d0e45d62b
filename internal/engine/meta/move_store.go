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
	return s.StartMoves(ctx, mf, []Placement{{Route: r, Node: target}})
}

// StartMoves starts several moves of one changefeed (each a Placement:
// the partition as read and its target) in one maintainer transaction,
// each entry compared at the revision it was read: one changed entry
// fails them all (ErrStale), and the next pass reads again. A drain
// starts a changefeed's moves together; one transaction each made a
// maintainer's pass as slow as four round trips to etcd.
func (s *Store) StartMoves(ctx context.Context, mf MaintainerFence, moves []Placement) error {
	return s.rewriteRoutes(ctx, mf, moves, func(m Placement, now time.Time) model.RouteEntry {
		next := m.Route.Route
		// A scheduler's move ends an operator's placement.
		next.Status, next.Target, next.Pinned, next.BusySince = model.PartitionDraining, m.Node, false, now
		return next
	})
}

// The routing table has one regular writer, the changefeed's maintainer.
// An operator's move or split begins with one coordinator write (the
// entry goes Draining, with where to or where to cut); the maintainer
// carries it through. Both compare the entry's revision, so neither can
// overwrite what the other wrote since it read.
