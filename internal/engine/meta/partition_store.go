package meta

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ReturnPartition ends a move or split that cannot complete (seed 003's
// failure table): the partition goes Active on node, at the next epoch,
// from start (0: from its persisted position), unpinned, with why in its
// history. A maintainer write.
func (s *Store) ReturnPartition(ctx context.Context, mf MaintainerFence, r RouteRecord, node model.NodeID, start model.Ts, why string, now time.Time) error {
	next := r.Route
	next.Node, next.Status, next.Epoch, next.Start = node, model.PartitionActive, r.Route.Epoch+1, start
	if start == 0 {
		next.StartCopy = model.CopyProgress{}
	}
	next.Target, next.SplitKey, next.BusySince, next.Pinned = "", "", time.Time{}, false
	next.Remember(model.PartitionEvent{Time: now, Kind: "returned", From: r.Route.Node, To: node, Detail: why})
	key := s.keys.Partition(next.Changefeed, next.ID)
	return s.casPut(ctx, key, next, mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision))
}

// RecoverPartition re-creates a partition's dispatcher on the node it
// runs on (seed 002's dispatcher recovery): Active, the next epoch, from
// its persisted position (its node knows where it stopped), with why in
// its history. A maintainer write.
func (s *Store) RecoverPartition(ctx context.Context, mf MaintainerFence, r RouteRecord, why string, now time.Time) error {
	next := r.Route
	next.Epoch, next.Start, next.StartCopy = r.Route.Epoch+1, 0, model.CopyProgress{}
	next.Remember(model.PartitionEvent{Time: now, Kind: "recovered", From: r.Route.Node, To: r.Route.Node, Detail: why, Epoch: r.Route.Epoch})
	key := s.keys.Partition(next.Changefeed, next.ID)
	return s.casPut(ctx, key, next, mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision))
}

// PlacePartition puts a partition on a node with the next epoch. It is a
// maintainer write: it lands only while the maintainer's placement holds
// and the entry is the one the maintainer read.
//
// start is the previous owner's final position after a graceful hand-over
// (0 otherwise): the new owner starts exactly there.
func (s *Store) PlacePartition(ctx context.Context, mf MaintainerFence, r RouteRecord, node model.NodeID, start model.Ts, copied model.CopyProgress) error {
	return s.PlacePartitions(ctx, mf, []Placement{{Route: r, Node: node, Start: start, Copy: copied}})
}

// PlacePartitions places several partitions of one changefeed, up to
// maxPlacementsPerTxn per maintainer transaction: a new changefeed's
// thousands of partitions cost tens of writes, not thousands (each write
// wakes every node's view). Each entry is still compared at the revision
// it was read; one changed entry fails its whole transaction (ErrStale),
// and the next pass reads again.
func (s *Store) PlacePartitions(ctx context.Context, mf MaintainerFence, ps []Placement) error {
	return s.rewriteRoutes(ctx, mf, ps, func(p Placement, now time.Time) model.RouteEntry {
		return placed(p.Route.Route, p.Node, p.Start, p.Copy, now)
	})
}

// rewriteRoutes writes next(p) over each placement's entry, up to
// maxPlacementsPerTxn per maintainer transaction, each entry compared at
// the revision it was read.
func (s *Store) rewriteRoutes(ctx context.Context, mf MaintainerFence, ps []Placement, next func(Placement, time.Time) model.RouteEntry) error {
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxPlacementsPerTxn)]
		ps = ps[len(chunk):]
		cmps := []clientv3.Cmp{mf.cmp()}
		var ops []clientv3.Op
		now := time.Now().UTC()
		for _, p := range chunk {
			r := next(p, now)
			key := s.keys.Partition(r.Changefeed, r.ID)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", p.Route.Revision))
			ops = append(ops, clientv3.OpPut(key, mustJSON(r)))
		}
		if err := s.commit(ctx, cmps, ops...); err != nil {
			return err
		}
	}
	return nil
}
