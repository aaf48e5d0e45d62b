package coordinator

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A rebalance (cdcctl partition rebalance) is a plan of partition moves
// (move.go) computed by the planner; what is its own is how a move whose
// destination left is re-planned.

// Replan sends a rebalance move whose destination left to the capture
// with the fewest of the changefeed's partitions; an operator's move is
// not second-guessed (Check fails it instead).
func (a *partitionActuator) Replan(ctx context.Context, p *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	if p.Kind != plan.KindRebalance || s.Kind != plan.StepMovePartition {
		return s, false, nil
	}
	to, ok := leastLoaded(a.c.view.State(), s.Changefeed)
	if !ok || to == s.From {
		return s, false, nil
	}
	s.To, s.Reason = to, "re-planned: the capture with the fewest of its partitions now"
	return s, true, nil
}

// leastLoaded is the schedulable capture with the fewest of a
// changefeed's partitions: where a rebalance move goes instead.
func leastLoaded(st *meta.State, cf string) (model.NodeID, bool) {
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	for _, r := range st.Partitions[model.ChangefeedID(cf)] {
		dest.Count(r.Route.Node)
	}
	return dest.Next()
}
