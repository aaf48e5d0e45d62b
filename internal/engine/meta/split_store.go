package meta

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// RequestSplit begins an operator's split of a partition at key (seed
// 003's split, step 3: the partition is busy). Its node stops it at a
// final position; the maintainer then cuts it. A coordinator write.
func (s *Store) RequestSplit(ctx context.Context, fence Fence, r RouteRecord, key string, now time.Time) error {
	if !fence.valid() {
		return ErrFenced
	}
	if err := r.Route.Span.ValidSplitKey(key); err != nil {
		return err
	}
	next := r.Route
	next.Status, next.Target, next.BusySince, next.SplitKey = model.PartitionDraining, r.Route.Node, now, key
	k := s.keys.Partition(next.Changefeed, next.ID)
	return s.casPut(ctx, k, next, append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(k), "=", r.Revision))...)
}

// SplitPartition cuts a Draining partition at its split key (seed 003's
// split, steps 5–10) in one maintainer transaction: the lower half keeps
// the id with the next epoch, the upper half gets a new id from the
// cluster counter; both go Active on node from start, and the progress
// record gets both halves at start, so the upper half's position is
// durable before it runs. It returns the upper half's id.
//
// before, if set, runs once the upper half's id is known and before the
// transaction (the halves' states go to the CheckpointStore there); its
// error stops the split.
func (s *Store) SplitPartition(ctx context.Context, mf MaintainerFence, r RouteRecord, node model.NodeID, start model.Ts, progress model.ProgressTable, now time.Time, before func(upperID string) error) (string, error) {
	key := r.Route.SplitKey
	if err := r.Route.Span.ValidSplitKey(key); err != nil {
		return "", err
	}
	ctr, err := s.cli.Get(ctx, s.keys.PartitionIDs())
	if err != nil {
		return "", fmt.Errorf("read the partition id counter: %w", err)
	}
	next, ctrCmp := uint64(0), clientv3.Compare(clientv3.CreateRevision(s.keys.PartitionIDs()), "=", 0)
	if len(ctr.Kvs) == 1 {
		next, _ = strconv.ParseUint(string(ctr.Kvs[0].Value), 10, 64)
		ctrCmp = clientv3.Compare(clientv3.ModRevision(s.keys.PartitionIDs()), "=", ctr.Kvs[0].ModRevision)
	}
	next++
	upperID := "p" + strconv.FormatUint(next, 10)
	if before != nil {
		if err := before(upperID); err != nil {
			return "", err
		}
	}
	from := r.Route.Node
	lower := r.Route
	lower.Span.End = key
	lower.Node, lower.Status, lower.Epoch, lower.Target, lower.Start, lower.SplitKey, lower.BusySince = node, model.PartitionActive, r.Route.Epoch+1, "", start, "", time.Time{}
	// The copy of the initial snapshot is cut like the span: each half
	// goes on with what is left of its own range.
	lowerCopy, upperCopy := progress[r.Route.ID].Copy.Cut(key)
	lower.StartCopy = model.CopyProgress{}
	if start != 0 {
		lower.StartCopy = lowerCopy
	}
	upper := lower
	upperSpan := r.Route.Span
	upperSpan.Start = key
	upper.ID, upper.Span, upper.Epoch, upper.History = upperID, upperSpan, 1, nil
	if start != 0 {
		upper.StartCopy = upperCopy
	}
	detail := fmt.Sprintf("at %q: upper half %s", model.DecodeKey(r.Route.Span.Key, key), upperID)
	var pause time.Duration
	if !r.Route.BusySince.IsZero() {
		// The pause: from the moment the partition went busy (its node
		// stops taking events) to both halves being placed.
		pause = now.Sub(r.Route.BusySince)
		detail += fmt.Sprintf("; paused %s", pause.Round(time.Millisecond))
	}
	lower.Remember(model.PartitionEvent{Time: now, Kind: "split", From: from, To: node, Detail: detail, Graceful: start != 0, Busy: pause})
	upper.Remember(model.PartitionEvent{Time: now, Kind: "split-from", From: from, To: node, Detail: fmt.Sprintf("upper half of %s, cut at %q", r.Route.ID, model.DecodeKey(r.Route.Span.Key, key)), Graceful: start != 0})
	table := make(model.ProgressTable, len(progress)+1)
	for pid, p := range progress {
		table[pid] = p
	}
	// After a source died (start 0) both halves resume from the last
	// persisted position of the whole.
	at := start
	if at == 0 {
		at = progress[r.Route.ID].Checkpoint
	}
	table[lower.ID] = model.Progress{Checkpoint: at, Node: node, Epoch: lower.Epoch, Copy: lowerCopy}
	table[upperID] = model.Progress{Checkpoint: at, Node: node, Epoch: upper.Epoch, Copy: upperCopy}
	k := s.keys.Partition(r.Route.Changefeed, r.Route.ID)
	cmps := []clientv3.Cmp{mf.cmp(), ctrCmp, clientv3.Compare(clientv3.ModRevision(k), "=", r.Revision)}
	// The halves' positions go with them: the shards that hold them.
	ops := append([]clientv3.Op{
		clientv3.OpPut(k, mustJSON(lower)),
		clientv3.OpPut(s.keys.Partition(upper.Changefeed, upperID), mustJSON(upper)),
		clientv3.OpPut(s.keys.PartitionIDs(), strconv.FormatUint(next, 10)),
	}, s.progressOps(nil, r.Route.Changefeed, table, lower.ID, upperID)...)
	err = s.commit(ctx, cmps, ops...)
	if err != nil {
		return "", err
	}
	return upperID, nil
}
