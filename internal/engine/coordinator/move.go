package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The move of a partition to another capture (cdcctl partition move, and
// the steps of a rebalance): validated at submission, begun with one
// write to its routing entry, checked until the target runs it. The
// maintainer's side is maintainer/move.go.

// validateMoveStep: an operator's move must still be one the planner
// would make; a rebalance's moves are re-checked as they run (Replan).
func validateMoveStep(snap *model.Snapshot, kind plan.Kind, s plan.Step) error {
	if kind != plan.KindMove {
		return nil
	}
	_, err := plan.ValidateMove(snap, s.Partition, s.To)
	return err
}

// requestMove asks the partition's maintainer to move it (the routing
// entry goes Draining with its target).
func (a *partitionActuator) requestMove(ctx context.Context, p *plan.Plan, s plan.Step, r meta.RouteRecord, now time.Time) error {
	return a.c.store.RequestMove(ctx, a.term.Fence, r, s.To, p.Kind == plan.KindMove, now)
}

// checkMove judges a move step from its routing entry and progress.
func checkMove(p *plan.Plan, s plan.Step, state exec.StepState, since time.Time, route model.RouteEntry, st *meta.State) exec.Outcome {
	if state == exec.StepPending {
		switch {
		case route.Node == s.To && route.Status == model.PartitionActive:
			return exec.Outcome{Done: true, Note: "already there"}
		case route.Node != s.From:
			if p.Kind == plan.KindMove {
				return exec.Outcome{Failed: fmt.Sprintf("it moved to %s meanwhile", route.Node)}
			}
			return exec.Outcome{Done: true, Note: fmt.Sprintf("skipped: the scheduler moved it to %s meanwhile", route.Node)}
		case begun(route, s):
			return exec.Outcome{}
		case route.Status == model.PartitionDraining:
			return exec.Outcome{Waiting: fmt.Sprintf("busy: moving %s → %s", route.Node, route.Target)}
		case !st.IsSchedulable(s.To):
			if p.Kind == plan.KindMove {
				return exec.Outcome{Failed: fmt.Sprintf("%s can no longer take work", s.To)}
			}
			if to, ok := leastLoaded(st, s.Changefeed); !ok || to == s.From {
				// Nowhere better to go: the partition staying where
				// it is is the rebalance's answer, not a step to wait
				// on for ever.
				return exec.Outcome{Done: true, Note: fmt.Sprintf("skipped: %s can no longer take work, and no other capture has fewer of the changefeed's partitions than %s; it stays there", s.To, s.From)}
			}
			return exec.Outcome{Impossible: string(s.To) + " can no longer take work"}
		}
		return exec.Outcome{}
	}
	if route.Status != model.PartitionActive {
		return exec.Outcome{}
	}
	if route.Node != s.To {
		why := "it went to " + string(route.Node) + " instead"
		if n := len(route.History); n > 0 && route.History[n-1].Kind == "returned" {
			why = "returned to " + string(route.Node) + ": " + route.History[n-1].Detail
		}
		if p.Kind == plan.KindMove {
			return exec.Outcome{Failed: "the move did not complete; " + why}
		}
		return exec.Outcome{Done: true, Note: why}
	}
	// Placed; done once the target runs it (seed 003's
	// PreparePartition succeeded): its first position is persisted.
	if pr := st.Progress[route.Changefeed][route.ID].Progress; pr.Node != s.To || pr.Epoch != route.Epoch {
		return exec.Outcome{}
	}
	return exec.Outcome{Done: true, Note: fmt.Sprintf("running on %s after %s", s.To, time.Since(since).Round(time.Millisecond))}
}
