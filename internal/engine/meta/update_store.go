package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// TablesUpdate is a change of a paused changefeed's tables: its info
// (the source URI) and reader's resume point after it, the partitions
// of the added tables, and those of the removed tables.
type TablesUpdate struct {
	Info           model.ChangefeedInfo
	SourcePosition json.RawMessage
	Add            []model.Span
	Since          model.Ts // where the added partitions start
	Remove         []string // partition ids
	// Barriers of the removed tables, dropped with them.
	RemoveTables []string
	// Resnapshot leaves a failed (or paused) changefeed paused, its error
	// and table issues cleared, with Incident among its incidents: its
	// tables are copied again from a new resume point (changefeed
	// resnapshot), which answers what failed it.
	Resnapshot bool
	Incident   model.Incident
	// Refollow is the status's record of the coordinator's change of
	// its tables after this update: the next step, or nil (an operator's
	// update takes the change over).
	Refollow *model.Refollow
	// RoutesAt is the store revision the caller read the changefeed's
	// routing table at (0: not checked): a partition written since (a
	// split's new half, a move) makes the update stale. A split finished
	// meanwhile left its new half beside the ranges the update replaced
	// or removed: copied twice, or a partition of a table gone.
	RoutesAt int64
}

// ErrTxnTooLarge refuses a change of more partitions than one etcd
// transaction can write: it is written whole or not at all.
var ErrTxnTooLarge = errors.New("the change is larger than one etcd transaction holds")

// FitsOneTxn refuses a TablesUpdate of add partitions added, remove
// removed and removeTables tables' records removed that one etcd
// transaction cannot write (ErrTxnTooLarge): asked before the upstream
// changes, a change refused so changes nothing.
func FitsOneTxn(add, remove, removeTables int) error {
	if 4+2*remove+removeTables+add > maxOpsPerTxn {
		return fmt.Errorf("%w: it adds %d and removes %d partitions (together at most %d)", ErrTxnTooLarge, add, remove, maxOpsPerTxn-4)
	}
	return nil
}

// UpdateTables writes a TablesUpdate in one transaction, only while the
// changefeed's status and info are as e read them (paused: nothing else
// writes them then). It returns the added partitions.
func (s *Store) UpdateTables(ctx context.Context, fence Fence, e *ChangefeedEntry, u TablesUpdate) ([]model.RouteEntry, error) {
	if !fence.valid() {
		return nil, ErrFenced
	}
	id := e.Info.ID
	status := e.Status
	status.SourcePosition, status.Refollow = u.SourcePosition, u.Refollow
	if u.Resnapshot {
		status.State, status.Error, status.Tables = model.ChangefeedPaused, "", nil
		status.Record(u.Incident)
	}
	if err := FitsOneTxn(len(u.Add), len(u.Remove), len(u.RemoveTables)); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		next, ctrCmp, err := s.partitionCounter(ctx)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{
			clientv3.OpPut(s.keys.ChangefeedInfo(id), mustJSON(u.Info)),
			clientv3.OpPut(s.keys.ChangefeedStatus(id), mustJSON(status)),
		}
		routes := make([]model.RouteEntry, len(u.Add))
		for i, sp := range u.Add {
			next++
			routes[i] = model.RouteEntry{ID: "p" + strconv.FormatUint(next, 10), Changefeed: id, Span: sp, Status: model.PartitionActive, Since: u.Since}
			ops = append(ops, clientv3.OpPut(s.keys.Partition(id, routes[i].ID), mustJSON(routes[i])))
		}
		if len(u.Add) > 0 {
			ops = append(ops, clientv3.OpPut(s.keys.PartitionIDs(), strconv.FormatUint(next, 10)))
		}
		for _, pid := range u.Remove {
			ops = append(ops, clientv3.OpDelete(s.keys.Partition(id, pid)), clientv3.OpDelete(s.keys.Checkpoint(id, pid)))
		}
		for _, t := range u.RemoveTables {
			ops = append(ops, clientv3.OpDelete(s.keys.Barrier(id, t)))
		}
		cmps := append(fence.cmps(),
			clientv3.Compare(clientv3.ModRevision(s.keys.ChangefeedStatus(id)), "=", e.StatusRevision),
			clientv3.Compare(clientv3.ModRevision(s.keys.ChangefeedInfo(id)), "=", e.InfoRevision))
		if len(u.Add) > 0 {
			cmps = append(cmps, ctrCmp)
		}
		if u.RoutesAt > 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.keys.Partitions(id)), "<", u.RoutesAt+1).WithPrefix())
		}
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("update changefeed %s: %w", id, err)
		}
		if tr.Succeeded {
			return routes, nil
		}
		if err := s.whyNot(ctx, fence, id); !errors.Is(err, ErrStale) {
			return nil, err
		}
		got, err := s.cli.Get(ctx, s.keys.ChangefeedStatus(id))
		if err != nil {
			return nil, err
		}
		if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != e.StatusRevision {
			return nil, ErrStale // the changefeed changed (resumed?) meanwhile
		}
		if u.RoutesAt > 0 {
			routes, err := s.cli.Get(ctx, s.keys.Partitions(id), clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return nil, err
			}
			for _, kv := range routes.Kvs {
				if kv.ModRevision > u.RoutesAt {
					return nil, fmt.Errorf("%w: partition %s changed since its routing table was read (a split or move)", ErrStale, strings.TrimPrefix(string(kv.Key), s.keys.Partitions(id)))
				}
			}
		}
		// Only the id counter moved (another changefeed was created or
		// split): again.
	}
	return nil, errors.New("update changefeed: the partition id counter kept changing; try again")
}
