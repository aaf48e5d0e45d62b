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

// A move whose source has handed the partition over (or died) comes back
// as the placement to write: place writes a pass's together, and counts
// the moves as ended so that the same pass starts the next ones.
func (h *Host) advanceMove(ctx context.Context, e *meta.ChangefeedEntry, mf meta.MaintainerFence, r meta.RouteRecord, table model.ProgressTable, sourceAlive bool, dest *plan.Destinations) (*meta.Placement, error) {
	target, pos := r.Route.Target, table[r.Route.ID]
	if !dest.IsCandidate(target) {
		next, ok := dest.Next()
		if !ok {
			return nil, nil
		}
		h.log.Info("maintainer: move target can no longer take the partition; re-planned", "partition", r.Route.ID, "was", target, "now", next)
		return nil, h.store.StartMove(ctx, mf, r, next)
	}
	final := pos.Final && pos.Handover && pos.Epoch == r.Route.Epoch
	if !final && sourceAlive {
		if busy := time.Since(r.Route.BusySince); h.cfg.MoveTimeout > 0 && !r.Route.BusySince.IsZero() && busy > h.cfg.MoveTimeout {
			// Seed 003, failure before MigrateOut: the source never gave
			// the partition up. It stays there (and resumes exactly where
			// it stopped, if it did: it knows its own final position).
			why := fmt.Sprintf("reverted: %s gave no final position within %s", r.Route.Node, h.cfg.MoveTimeout)
			h.log.Warn("maintainer: move or split reverted", "partition", r.Route.ID, "source", r.Route.Node, "target", target, "busy", busy.Round(time.Millisecond))
			return nil, h.store.ReturnPartition(ctx, mf, r, r.Route.Node, 0, why, time.Now().UTC())
		}
		return nil, nil // the source is still draining it
	}
	if !final {
		h.log.Info("maintainer: source of a move died; the target resumes from the last checkpoint", "partition", r.Route.ID, "from", r.Route.Node, "to", target)
	}
	start := model.Ts(0)
	if final {
		start = pos.Checkpoint
	}
	if r.Route.SplitKey != "" {
		return nil, h.split(ctx, e, mf, r, target, start, table)
	}
	if h.cfg.Faults != nil {
		if err := h.cfg.Faults.BeforePlace(r.Route); err != nil {
			return nil, err
		}
	}
	return &meta.Placement{Route: r, Node: target, Start: start, Copy: pos.Copy}, nil
}

// placeMoved writes the placements of the moves a pass found handed
// over, in as few transactions as fit.
func (h *Host) placeMoved(ctx context.Context, e *meta.ChangefeedEntry, mf meta.MaintainerFence, moved []meta.Placement) error {
	if err := h.store.PlacePartitions(ctx, mf, moved); err != nil {
		return err
	}
	for _, p := range moved {
		h.log.Info("maintainer: partition moved", "changefeed", e.Info.ID, "partition", p.Route.Route.ID, "from", p.Route.Route.Node, "to", p.Node,
			"epoch", p.Route.Route.Epoch+1, "graceful", p.Start != 0)
	}
	return nil
}
