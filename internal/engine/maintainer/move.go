package maintainer

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A partition's move (seed 003's migration through the routing table):
// the coordinator's step (coordinator/move.go) or the balance scheduler
// (rebalance.go) marks its entry Draining with a target; advanceMove
// carries it there.

func (h *Host) advanceMove(ctx context.Context, e *meta.ChangefeedEntry, mf meta.MaintainerFence, r meta.RouteRecord, table model.ProgressTable, sourceAlive bool, dest *plan.Destinations) error {
	target, pos := r.Route.Target, table[r.Route.ID]
	if !dest.IsCandidate(target) {
		next, ok := dest.Next()
		if !ok {
			return nil
		}
		h.log.Info("maintainer: move target can no longer take the partition; re-planned", "partition", r.Route.ID, "was", target, "now", next)
		return h.store.StartMove(ctx, mf, r, next)
	}
	final := pos.Final && pos.Handover && pos.Epoch == r.Route.Epoch
	if !final && sourceAlive {
		if busy := time.Since(r.Route.BusySince); h.cfg.MoveTimeout > 0 && !r.Route.BusySince.IsZero() && busy > h.cfg.MoveTimeout {
			// Seed 003, failure before MigrateOut: the source never gave
			// the partition up. It stays there (and resumes exactly where
			// it stopped, if it did: it knows its own final position).
			why := fmt.Sprintf("reverted: %s gave no final position within %s", r.Route.Node, h.cfg.MoveTimeout)
			h.log.Warn("maintainer: move or split reverted", "partition", r.Route.ID, "source", r.Route.Node, "target", target, "busy", busy.Round(time.Millisecond))
			return h.store.ReturnPartition(ctx, mf, r, r.Route.Node, 0, why, time.Now().UTC())
		}
		return nil // the source is still draining it
	}
	if !final {
		h.log.Info("maintainer: source of a move died; the target resumes from the last checkpoint", "partition", r.Route.ID, "from", r.Route.Node, "to", target)
	}
	start := model.Ts(0)
	if final {
		start = pos.Checkpoint
	}
	if r.Route.SplitKey != "" {
		return h.split(ctx, e, mf, r, target, start, table)
	}
	if h.cfg.Faults != nil {
		if err := h.cfg.Faults.BeforePlace(r.Route); err != nil {
			return err
		}
	}
	if err := h.store.PlacePartition(ctx, mf, r, target, start, pos.Copy); err != nil {
		return err
	}
	h.log.Info("maintainer: partition moved", "changefeed", e.Info.ID, "partition", r.Route.ID, "from", r.Route.Node, "to", target, "epoch", r.Route.Epoch+1, "graceful", final)
	return nil
}
