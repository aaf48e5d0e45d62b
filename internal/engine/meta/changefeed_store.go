package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrChangefeedExists means the name is taken.
var ErrChangefeedExists = errors.New("changefeed already exists")

// ErrChangefeedNotFound means there is no changefeed of that name.
var ErrChangefeedNotFound = errors.New("changefeed not found")

// ErrStale means the object changed since it was read; read and decide again.
var ErrStale = errors.New("the object changed since it was read")

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are marshalled here
	}
	return string(b)
}

func (f MaintainerFence) cmp() clientv3.Cmp {
	if f.Revision <= 0 {
		return never(f.Key) // revision 0 would hold for a maintainer key that is gone
	}
	return clientv3.Compare(clientv3.ModRevision(f.Key), "=", f.Revision)
}

// casPut writes one key if every comparison holds; ErrStale otherwise.
func (s *Store) casPut(ctx context.Context, key string, value any, cmps ...clientv3.Cmp) error {
	return s.commit(ctx, cmps, clientv3.OpPut(key, mustJSON(value)))
}

// commit runs ops if every comparison holds; ErrStale otherwise.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) error {
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return ErrStale
	}
	return nil
}

// maxOpsPerTxn keeps every transaction under etcd's --max-txn-ops (128
// by default), with room for its comparisons.
const maxOpsPerTxn = 100

// CreateChangefeed writes a new changefeed and its routing table.
// Partition ids come from the cluster counter. A changefeed whose routing
// table fits in one transaction is written in one; a larger one is
// written in steps that stay atomic where it matters: its ids are
// reserved first, its partitions written in chunks, and its info and
// status last. Nothing reads partitions of a changefeed without info, so
// until that last write the changefeed does not exist; an interrupted
// create leaves partitions that the next create of that id removes.
func (s *Store) CreateChangefeed(ctx context.Context, fence Fence, info model.ChangefeedInfo, sourcePosition json.RawMessage, spans []model.Span) ([]model.RouteEntry, error) {
	if !fence.valid() {
		return nil, ErrFenced
	}
	absent := clientv3.Compare(clientv3.CreateRevision(s.keys.ChangefeedInfo(info.ID)), "=", 0)
	head := []clientv3.Op{
		clientv3.OpPut(s.keys.ChangefeedInfo(info.ID), mustJSON(info)),
		clientv3.OpPut(s.keys.ChangefeedStatus(info.ID), mustJSON(model.ChangefeedStatus{State: model.ChangefeedNormal, CheckpointTs: info.StartTs, SourcePosition: sourcePosition})),
		// The create's own cleanup record (BeginCreate) goes with the
		// write that makes the changefeed exist: from then on its
		// removal is what releases the source.
		clientv3.OpDelete(s.keys.Cleanup(info.ID)),
	}
	oneTxn := len(spans)+len(head)+2 <= maxOpsPerTxn
	for attempt := 0; attempt < 5; attempt++ {
		next, ctrCmp, err := s.partitionCounter(ctx)
		if err != nil {
			return nil, err
		}
		routes := make([]model.RouteEntry, len(spans))
		var puts []clientv3.Op
		for i, sp := range spans {
			next++
			routes[i] = model.RouteEntry{ID: "p" + strconv.FormatUint(next, 10), Changefeed: info.ID, Span: sp, Status: model.PartitionActive}
			puts = append(puts, clientv3.OpPut(s.keys.Partition(info.ID, routes[i].ID), mustJSON(routes[i])))
		}
		reserve := clientv3.OpPut(s.keys.PartitionIDs(), strconv.FormatUint(next, 10))
		cmps := append(fence.cmps(), ctrCmp, absent)
		var ops []clientv3.Op
		if oneTxn {
			ops = append(append(append(ops, head...), puts...), reserve)
		} else {
			// Reserve the ids, and clear what an interrupted create of
			// this id left.
			ops = []clientv3.Op{reserve, clientv3.OpDelete(s.keys.Partitions(info.ID), clientv3.WithPrefix())}
		}
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("create changefeed %s: %w", info.ID, err)
		}
		if tr.Succeeded {
			if oneTxn {
				return routes, nil
			}
			return routes, s.createInSteps(ctx, fence, info.ID, absent, puts, head)
		}
		if holds, err := s.fenceHolds(ctx, fence); err != nil {
			return nil, err
		} else if !holds {
			return nil, ErrFenced
		}
		if got, err := s.cli.Get(ctx, s.keys.ChangefeedInfo(info.ID), clientv3.WithCountOnly()); err == nil && got.Count > 0 {
			return nil, fmt.Errorf("%w: %s", ErrChangefeedExists, info.ID)
		}
		// The id counter moved (another changefeed was created): again.
	}
	return nil, errors.New("create changefeed: the partition id counter kept changing; try again")
}

// partitionCounter reads the last partition id given out, and the
// comparison that holds while no one gives out another.
func (s *Store) partitionCounter(ctx context.Context) (uint64, clientv3.Cmp, error) {
	ctr, err := s.cli.Get(ctx, s.keys.PartitionIDs())
	if err != nil {
		return 0, clientv3.Cmp{}, fmt.Errorf("read the partition id counter: %w", err)
	}
	if len(ctr.Kvs) == 0 {
		return 0, clientv3.Compare(clientv3.CreateRevision(s.keys.PartitionIDs()), "=", 0), nil
	}
	next, _ := strconv.ParseUint(string(ctr.Kvs[0].Value), 10, 64)
	return next, clientv3.Compare(clientv3.ModRevision(s.keys.PartitionIDs()), "=", ctr.Kvs[0].ModRevision), nil
}

// createInSteps writes a large changefeed's partitions in chunks, then
// its info and status, each step fenced and only while the changefeed
// does not exist. A failed step removes the partitions written.
func (s *Store) createInSteps(ctx context.Context, fence Fence, id model.ChangefeedID, absent clientv3.Cmp, puts, head []clientv3.Op) error {
	cmps := append(fence.cmps(), absent)
	var err error
	for len(puts) > 0 && err == nil {
		chunk := puts[:min(len(puts), maxOpsPerTxn)]
		puts = puts[len(chunk):]
		err = s.commit(ctx, cmps, chunk...)
	}
	if err == nil {
		err = s.commit(ctx, cmps, head...)
	}
	if err == nil {
		return nil
	}
	_ = s.commit(context.WithoutCancel(ctx), cmps, clientv3.OpDelete(s.keys.Partitions(id), clientv3.WithPrefix()))
	if errors.Is(err, ErrStale) {
		if holds, ferr := s.fenceHolds(ctx, fence); ferr == nil && !holds {
			return ErrFenced
		}
		return fmt.Errorf("%w: %s", ErrChangefeedExists, id)
	}
	return fmt.Errorf("create changefeed %s: %w", id, err)
}

// RemoveChangefeed deletes a changefeed (its progress record is under its
// prefix), its routing table, its barriers and its partitions' states in
// the etcd CheckpointStore.
//
// cleanup, if not nil, is written in the same transaction: what the
// changefeed's source holds upstream is then never forgotten, whatever
// happens to the coordinator before it is released.
func (s *Store) RemoveChangefeed(ctx context.Context, fence Fence, id model.ChangefeedID, cleanup *model.SourceCleanup) error {
	ops := []clientv3.Op{
		clientv3.OpDelete(s.keys.ChangefeedPrefix(id), clientv3.WithPrefix()),
		clientv3.OpDelete(s.keys.Partitions(id), clientv3.WithPrefix()),
		clientv3.OpDelete(s.keys.BarriersPrefix()+string(id)+"/", clientv3.WithPrefix()),
		clientv3.OpDelete(s.keys.Checkpoint(id, ""), clientv3.WithPrefix()),
	}
	if cleanup != nil {
		b, err := json.Marshal(cleanup)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(s.keys.Cleanup(id), string(b)))
	}
	tr, err := s.cli.Txn(ctx).
		If(append(fence.cmps(), clientv3.Compare(clientv3.CreateRevision(s.keys.ChangefeedInfo(id)), ">", 0))...).
		Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("remove changefeed %s: %w", id, err)
	}
	if !tr.Succeeded {
		return s.whyNot(ctx, fence, id)
	}
	return nil
}

func (s *Store) whyNot(ctx context.Context, fence Fence, id model.ChangefeedID) error {
	if holds, err := s.fenceHolds(ctx, fence); err != nil {
		return err
	} else if !holds {
		return ErrFenced
	}
	got, err := s.cli.Get(ctx, s.keys.ChangefeedInfo(id), clientv3.WithCountOnly())
	if err == nil && got.Count == 0 {
		return fmt.Errorf("%w: %s", ErrChangefeedNotFound, id)
	}
	return ErrStale
}

// SetChangefeedState pauses or resumes a changefeed (coordinator write).
// A resume starts its reader again, which reads its held tables again:
// all of them, or only those named (the others stay held, their issues
// kept).
func (s *Store) SetChangefeedState(ctx context.Context, fence Fence, e *ChangefeedEntry, state model.ChangefeedState, by string, tables ...string) error {
	st := e.Status
	st.State = state
	if by != "" {
		// Who paused or resumed it, among the changefeed's incidents.
		kind := "resumed"
		if state == model.ChangefeedPaused {
			kind = "paused"
		}
		st.Record(model.Incident{Time: time.Now().UTC(), Kind: kind, Reason: "by " + by})
	}
	if state == model.ChangefeedNormal {
		st.Refollow = nil // the coordinator's change, made or taken over
		st.Error = ""     // resumed: the operator fixed what failed it
		st.Run++          // its reader starts again, and reads held tables again
		if len(tables) == 0 {
			st.Tables = nil
		} else {
			st.Tables = slices.DeleteFunc(slices.Clone(st.Tables), func(i model.TableIssue) bool { return slices.Contains(tables, i.Table) })
		}
	}
	return s.putStatus(ctx, fence, e, st)
}

// FailResume fails a stopped changefeed whose resume the coordinator
// refused (its upstream cannot give what it resumes from), as its reader
// would have failed it once started: the reason, and the failure among
// its incidents. Like a resume, it takes over a change of tables the
// coordinator paused it for (Refollow): that would resume it, failed.
func (s *Store) FailResume(ctx context.Context, fence Fence, e *ChangefeedEntry, by string, failed model.Incident) error {
	st := e.Status
	st.State, st.Error, st.Refollow = model.ChangefeedFailed, failed.Reason, nil
	if by != "" {
		failed.Reason += " (a resume by " + by + " refused)"
	}
	st.Record(failed)
	return s.putStatus(ctx, fence, e, st)
}

// PauseToRefollow pauses a changefeed for a change of its tables the
// coordinator makes itself, recorded with the pause (model.Refollow)
// so that the next coordinator finishes it if this one stops.
func (s *Store) PauseToRefollow(ctx context.Context, fence Fence, e *ChangefeedEntry, r model.Refollow) error {
	st := e.Status
	st.State, st.Refollow = model.ChangefeedPaused, &r
	st.Record(model.Incident{Time: time.Now().UTC(), Kind: "paused", Reason: "by " + r.By})
	return s.putStatus(ctx, fence, e, st)
}

// putStatus writes a changefeed's status as a coordinator, only while it
// is as e read it.
func (s *Store) putStatus(ctx context.Context, fence Fence, e *ChangefeedEntry, st model.ChangefeedStatus) error {
	key := s.keys.ChangefeedStatus(e.Info.ID)
	tr, err := s.cli.Txn(ctx).If(append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision))...).
		Then(clientv3.OpPut(key, mustJSON(st))).Commit()
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return s.whyNot(ctx, fence, e.Info.ID)
	}
	return nil
}

// PlaceMaintainer puts a changefeed's maintainer on a node with the next
// epoch (coordinator write, compare-and-swap on the placement).
func (s *Store) PlaceMaintainer(ctx context.Context, fence Fence, e *ChangefeedEntry, node model.NodeID) error {
	key := s.keys.Maintainer(e.Info.ID)
	p := model.MaintainerPlacement{Node: node, Epoch: e.Maintainer.Epoch + 1}
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", e.MaintainerRevision)
	tr, err := s.cli.Txn(ctx).If(append(fence.cmps(), cmp, clientv3.Compare(clientv3.CreateRevision(s.keys.ChangefeedInfo(e.Info.ID)), ">", 0))...).
		Then(clientv3.OpPut(key, mustJSON(p))).Commit()
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return s.whyNot(ctx, fence, e.Info.ID)
	}
	return nil
}

// Placement is one partition to place: on Node, from Start (0: from its
// persisted position), where its copy's progress was Copy.
type Placement struct {
	Route RouteRecord
	Node  model.NodeID
	Start model.Ts
	Copy  model.CopyProgress
}

// maxPlacementsPerTxn keeps a transaction under etcd's default limit of
// 128 operations (and comparisons) per transaction.
const maxPlacementsPerTxn = 100

// placed is a routing entry Active on node from start, at the next epoch,
// with what happened in its history.
func placed(r model.RouteEntry, node model.NodeID, start model.Ts, copied model.CopyProgress, now time.Time) model.RouteEntry {
	next := r
	next.Node, next.Status, next.Epoch, next.Target, next.Start, next.BusySince = node, model.PartitionActive, r.Epoch+1, "", start, time.Time{}
	next.StartCopy = model.CopyProgress{}
	if start != 0 {
		next.StartCopy = copied
	}
	switch {
	case r.Node == "":
	case start != 0:
		ev := model.PartitionEvent{Time: now, Kind: "moved", From: r.Node, To: node, Graceful: true}
		if !r.BusySince.IsZero() {
			ev.Busy = ev.Time.Sub(r.BusySince)
			ev.Detail = fmt.Sprintf("after %s busy", ev.Busy.Round(time.Millisecond))
		}
		next.Remember(ev)
	default:
		// Its node died: the operator's placement, if any, is over.
		next.Pinned = false
		next.Remember(model.PartitionEvent{Time: now, Kind: "placed", From: r.Node, To: node, Detail: "from its last checkpoint"})
	}
	return next
}

// SaveProgress records a changefeed's partition positions and, if it
// moved forward, its checkpoint, in one maintainer write. The progress
// record has one writer, the maintainer, so only the placement fences it;
// the status is compared, because the coordinator writes it too. A
// source position (a database reader's resume point at or below the
// checkpoint) goes with the checkpoint it belongs to.
//
// Only the shards of the positions that differ from st's are written
// (progress.go), in as many transactions as their size needs, the
// checkpoint in the last; only, if given, limits them to the shards of
// those partitions ("" names none: the checkpoint alone).
func (s *Store) SaveProgress(ctx context.Context, mf MaintainerFence, st *State, e *ChangefeedEntry, checkpoint model.Ts, sourcePosition json.RawMessage, table model.ProgressTable, only ...string) error {
	cmps := []clientv3.Cmp{mf.cmp()}
	ops := s.progressOps(st, e.Info.ID, table, only...)
	var statusCmps []clientv3.Cmp
	var status []clientv3.Op
	if checkpoint > e.Status.CheckpointTs {
		cs := e.Status
		cs.CheckpointTs = checkpoint
		if cs.State != model.ChangefeedFailed {
			cs.Error = "" // progress: whatever held the changefeed back is over
		}
		if sourcePosition != nil {
			cs.SourcePosition = sourcePosition
		}
		key := s.keys.ChangefeedStatus(e.Info.ID)
		statusCmps = append(statusCmps, clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision))
		status = append(status, clientv3.OpPut(key, mustJSON(cs)))
	}
	return s.commitInChunks(ctx, cmps, ops, statusCmps, status...)
}

// SetChangefeedError records why a changefeed does not advance (maintainer
// write; "" clears it). The next checkpoint advance clears it too.
func (s *Store) SetChangefeedError(ctx context.Context, mf MaintainerFence, e *ChangefeedEntry, msg string) error {
	if e.Status.Error == msg {
		return nil
	}
	st := e.Status
	st.Error = msg
	key := s.keys.ChangefeedStatus(e.Info.ID)
	return s.commit(ctx, []clientv3.Cmp{mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision)}, clientv3.OpPut(key, mustJSON(st)))
}

// SetTableIssues records what the changefeed's reader reports of its
// tables (maintainer write).
func (s *Store) SetTableIssues(ctx context.Context, mf MaintainerFence, e *ChangefeedEntry, issues []model.TableIssue) error {
	st := e.Status
	st.Tables = issues
	key := s.keys.ChangefeedStatus(e.Info.ID)
	return s.commit(ctx, []clientv3.Cmp{mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision)}, clientv3.OpPut(key, mustJSON(st)))
}

// FailChangefeed stops a changefeed for an error an operator must fix
// (maintainer write): its dispatchers stop where they are, and it waits
// for `changefeed resume`.
func (s *Store) FailChangefeed(ctx context.Context, mf MaintainerFence, e *ChangefeedEntry, msg string, in ...model.Incident) error {
	st := e.Status
	st.State, st.Error = model.ChangefeedFailed, msg
	st.Record(in...)
	key := s.keys.ChangefeedStatus(e.Info.ID)
	return s.commit(ctx, []clientv3.Cmp{mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision)}, clientv3.OpPut(key, mustJSON(st)))
}

// RecordIncidents adds recoveries and restarts to a changefeed's status
// (maintainer write), and, if stalled is not "", records it as why the
// changefeed does not advance (SetChangefeedError), in the same write.
func (s *Store) RecordIncidents(ctx context.Context, mf MaintainerFence, e *ChangefeedEntry, in []model.Incident, stalled string) error {
	st := e.Status
	st.Record(in...)
	if stalled != "" {
		st.Error = stalled
	}
	key := s.keys.ChangefeedStatus(e.Info.ID)
	return s.commit(ctx, []clientv3.Cmp{mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", e.StatusRevision)}, clientv3.OpPut(key, mustJSON(st)))
}

// SetBarrier opens a table's DDL barrier (maintainer write), replacing the
// previous one if the caller read it at prevRevision (0: none).
func (s *Store) SetBarrier(ctx context.Context, mf MaintainerFence, cf model.ChangefeedID, b model.Barrier, prevRevision int64) error {
	key := s.keys.Barrier(cf, b.Table)
	return s.casPut(ctx, key, b, mf.cmp(), clientv3.Compare(clientv3.ModRevision(key), "=", prevRevision))
}

// MarkBarrierWritten records that the writer wrote the DDL. It compares
// only the barrier itself: once the DDL is in the sink, the mark must land
// even if the writer's routing entry changed meanwhile (a move started),
// or the next owner would write the DDL again.
func (s *Store) MarkBarrierWritten(ctx context.Context, cf model.ChangefeedID, br BarrierRecord) error {
	b := br.Barrier
	b.Written = true
	key := s.keys.Barrier(cf, b.Table)
	return s.casPut(ctx, key, b, clientv3.Compare(clientv3.ModRevision(key), "=", br.Revision))
}

// ErrDrainInProgress means the cluster already has a drain record.
var ErrDrainInProgress = errors.New("another drain operation is in progress")

// BeginCreate records, before a create pins its source upstream (a
// PostgreSQL slot, which holds WAL until dropped), the cleanup that
// releases it: a coordinator that dies before the changefeed is written
// leaves a record the next one retries, not a slot nothing names.
// CreateChangefeed deletes it in the write that makes the changefeed
// exist. It is refused (ErrStale) while a changefeed or a cleanup of the
// name exists: a second create of one name (a client retrying after its
// timeout) waits for the first instead of pinning, and then releasing,
// the first one's slot.
func (s *Store) BeginCreate(ctx context.Context, fence Fence, c model.SourceCleanup) error {
	if !fence.valid() {
		return ErrFenced
	}
	cmps := append(fence.cmps(),
		clientv3.Compare(clientv3.CreateRevision(s.keys.ChangefeedInfo(c.Changefeed)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Cleanup(c.Changefeed)), "=", 0))
	err := s.commit(ctx, cmps, clientv3.OpPut(s.keys.Cleanup(c.Changefeed), mustJSON(c)))
	if errors.Is(err, ErrStale) {
		if holds, ferr := s.fenceHolds(ctx, fence); ferr == nil && !holds {
			return ErrFenced
		}
	}
	return err
}

// SaveCleanup records another failed attempt at a source cleanup, if the
// record is still at revision. A coordinator write.
func (s *Store) SaveCleanup(ctx context.Context, fence Fence, c model.SourceCleanup, revision int64) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	cmps := append(fence.cmps(), clientv3.Compare(clientv3.ModRevision(s.keys.Cleanup(c.Changefeed)), "=", revision))
	return s.commit(ctx, cmps, clientv3.OpPut(s.keys.Cleanup(c.Changefeed), string(b)))
}

// CleanupAt says whether a source cleanup is still recorded at revision:
// one a watched view shows may be gone (released, forgotten, its name
// taken again) by the time it is retried.
func (s *Store) CleanupAt(ctx context.Context, id model.ChangefeedID, revision int64) (bool, error) {
	got, err := s.cli.Get(ctx, s.keys.Cleanup(id))
	if err != nil {
		return false, err
	}
	return len(got.Kvs) == 1 && got.Kvs[0].ModRevision == revision, nil
}

// Cleanup reads the source cleanup recorded under a changefeed's name,
// if there is one.
func (s *Store) Cleanup(ctx context.Context, id model.ChangefeedID) (model.SourceCleanup, bool, error) {
	got, err := s.cli.Get(ctx, s.keys.Cleanup(id))
	if err != nil || len(got.Kvs) == 0 {
		return model.SourceCleanup{}, false, err
	}
	var c model.SourceCleanup
	if err := json.Unmarshal(got.Kvs[0].Value, &c); err != nil {
		return model.SourceCleanup{}, false, fmt.Errorf("cleanup record of %s: %w", id, err)
	}
	return c, true, nil
}

// ForgetCleanup deletes a source cleanup that is done. A coordinator
// write.
func (s *Store) ForgetCleanup(ctx context.Context, fence Fence, id model.ChangefeedID) error {
	return s.commit(ctx, fence.cmps(), clientv3.OpDelete(s.keys.Cleanup(id)))
}
