package maintainer

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition's split at a key (seed 003's Actor.Split): the
// coordinator's step (coordinator/split.go) marks its entry Draining with
// the key; once its node has stopped it, the halves are written here.

// split cuts a partition whose node stopped it (or died): both halves
// start where the whole stopped, on the split's target.
func (h *Host) split(ctx context.Context, e *meta.ChangefeedEntry, mf meta.MaintainerFence, r meta.RouteRecord, node model.NodeID, start model.Ts, table model.ProgressTable) error {
	if start == 0 {
		table = h.afterSinkHolds(ctx, e, r.Route, table)
	}
	now := time.Now().UTC()
	upper, err := h.store.SplitPartition(ctx, mf, r, node, start, table, now, func(upperID string) error {
		return h.splitState(ctx, r.Route, upperID, start)
	})
	if err != nil {
		return err
	}
	h.log.Info("maintainer: partition split", "changefeed", e.Info.ID, "partition", r.Route.ID, "key", r.Route.SplitKey, "upper", upper,
		"node", node, "graceful", start != 0, "paused", now.Sub(r.Route.BusySince).Round(time.Millisecond))
	return errSplit
}

// afterSinkHolds is the progress table with the position of a partition
// whose node died moved up to what an exactly-once sink holds of it.
// Both halves of its split resume from its position: the lower half,
// keeping its id, would resume after the sink's record of it anyway, but
// the upper half is new, has no record, and from the persisted
// checkpoint wrote again the rows of its keys that the whole had written
// after it (TestChaosFoundThese, seed 20263210: 8 rows twice after every
// session expired during a split). The sink's record is read before
// either half runs, so it is the whole's, and reading it fences the
// whole's writers.
func (h *Host) afterSinkHolds(ctx context.Context, e *meta.ChangefeedEntry, r model.RouteEntry, table model.ProgressTable) model.ProgressTable {
	p, ok := table[r.ID]
	if h.cfg.SinkHolds == nil || !ok {
		return table
	}
	at, copied := h.cfg.SinkHolds(ctx, e, r, p.Checkpoint, p.Copy)
	if at == p.Checkpoint && copied == p.Copy {
		return table
	}
	out := maps.Clone(table)
	p.Checkpoint, p.Copy = at, copied
	out[r.ID] = p
	return out
}

// splitState is seed 003's Actor.Split on the state the partition's node
// saved when it stopped: the lower half's state under the partition's id
// (next epoch), the upper half's under its new id. Without a graceful
// stop (start 0: the node died) there is no exact state to cut; both
// halves resume from the persisted position.
func (h *Host) splitState(ctx context.Context, r model.RouteEntry, upperID string, start model.Ts) error {
	if h.cfg.Checkpoints == nil || start == 0 {
		return nil
	}
	a, err := checkpoint.LoadActor(ctx, h.cfg.Checkpoints, r.Changefeed, r.ID)
	if err != nil {
		return err
	}
	// The saved position may be below start (the node restarted and
	// handed over at its persisted position, while the maintainer had
	// heard a later one): start is durable, and both halves begin there.
	if a.Position() > start {
		return fmt.Errorf("the saved state of %s is at %s, past the hand-over at %s", r.ID, a.Position(), start)
	}
	lowerSpan := r.Span
	lowerSpan.End = r.SplitKey
	var upper, lower []byte
	// By range, not whole spans: state saved by an older agent has no
	// KeyColumns, and an exact match would leave the split Draining.
	switch saved := a.Span(); {
	case saved.SameRange(r.Span):
		a = actor.NewReplication(r.Span, start)
		if upper, err = a.Split(r.SplitKey); err != nil {
			return err
		}
		if lower, err = a.Snapshot(); err != nil {
			return err
		}
	case saved.SameRange(lowerSpan):
		// Cut already by an attempt whose routing transaction failed:
		// the upper half's state is made again, at the same position.
		if lower, err = actor.NewReplication(lowerSpan, start).Snapshot(); err != nil {
			return err
		}
		upperSpan := r.Span
		upperSpan.Start = r.SplitKey
		if upper, err = actor.NewReplication(upperSpan, start).Snapshot(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("the saved state of %s is for %s, not %s", r.ID, a.Span(), r.Span)
	}
	if err := h.cfg.Checkpoints.Save(ctx, r.Changefeed, upperID, 1, upper); err != nil {
		return err
	}
	return h.cfg.Checkpoints.Save(ctx, r.Changefeed, r.ID, r.Epoch+1, lower)
}
