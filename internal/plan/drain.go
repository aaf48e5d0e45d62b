package plan

import (
	"fmt"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ValidateDrain applies seed 000's error table.
func ValidateDrain(s *model.Snapshot, target model.NodeID) error {
	n, ok := s.Node(target)
	if !ok {
		return &Refusal{RefuseNotFound, fmt.Sprintf("cannot drain %s: capture not found", target), "list the captures with 'cdcctl capture list'"}
	}
	if target == s.Coordinator {
		return &Refusal{RefuseInvalid, fmt.Sprintf("cannot drain %s: it is the coordinator", target),
			fmt.Sprintf("hand the coordinator role to another capture first ('cdcctl coordinator resign'), then drain %s", target)}
	}
	if len(s.Nodes) < 2 {
		return &Refusal{RefuseInvalid, "cannot drain: at least 2 captures required for drain operation", "start another capture first"}
	}
	again := s.Draining == target && s.DrainEnded && n.Liveness == model.LivenessDraining
	if s.Draining != "" && s.DrainEnded && !again {
		return &Refusal{RefuseInProgress, fmt.Sprintf("cannot drain %s: %s is still Draining, from a drain that ended without finishing it (failed or cancelled)", target, s.Draining),
			fmt.Sprintf("drain %s again to finish it ('cdcctl drain %s'), or restart its process to bring it back Alive; then drain %s", s.Draining, s.Draining, target)}
	}
	if s.Draining != "" && !again {
		return &Refusal{RefuseInProgress, fmt.Sprintf("cannot drain %s: another drain operation is in progress (%s)", target, s.Draining),
			"wait for it to finish ('cdcctl plan list'), or cancel it"}
	}
	if n.Liveness != model.LivenessAlive && !again {
		return &Refusal{RefuseInProgress, fmt.Sprintf("cannot drain %s: it is %s", target, n.Liveness), "only an Alive capture can be drained"}
	}
	for _, o := range s.Nodes {
		if o.Info.ID != target && o.Liveness.IsSchedulable() {
			return nil
		}
	}
	return &Refusal{RefuseNoDestination, fmt.Sprintf("cannot drain %s: no other capture is Alive to take its work", target), "start another capture first"}
}

// Drain plans seed 000's drain of target: the capture goes Draining; its
// maintainers move in batches of at most batch, each to the least-loaded
// schedulable capture counting the moves already planned; then the
// partitions it runs move (per changefeed, least-loaded first, as the
// maintainers will do it); then it goes Stopping.
func Drain(s *model.Snapshot, target model.NodeID, batch int, costs Costs) (*Plan, error) {
	if err := ValidateDrain(s, target); err != nil {
		return nil, err
	}
	if batch < 1 {
		batch = 1
	}
	p := &Plan{Version: 1, Kind: KindDrain, Target: target, BatchSize: batch,
		Fingerprint: fingerprintAll(s)}
	p.Batches = drainBatches(s, target, batch)
	p.PredictedMillis = predict(p.Batches, costs).Milliseconds()
	return p, nil
}

// drainBatches are the steps of a drain of target, as Drain describes
// them; a rollout drains each capture with the same.
func drainBatches(s *model.Snapshot, target model.NodeID, batch int) []Batch {
	p := &Plan{}
	var schedulable []model.NodeID
	for _, n := range s.Nodes {
		if n.Info.ID != target && n.Liveness.IsSchedulable() {
			schedulable = append(schedulable, n.Info.ID)
		}
	}
	p.Batches = append(p.Batches, Batch{Steps: []Step{{Kind: StepSetLiveness, To: target, Liveness: model.LivenessDraining.String(),
		Reason: "no new work goes to a Draining capture, and it never becomes coordinator"}}})

	maint := NewDestinations(schedulable)
	var moving []model.ChangefeedPlacement
	for _, cf := range s.Changefeeds {
		if cf.Maintainer.Node == target {
			moving = append(moving, cf)
		} else {
			maint.Count(cf.Maintainer.Node)
		}
	}
	for i := 0; i < len(moving); i += batch {
		var b Batch
		for _, cf := range moving[i:min(i+batch, len(moving))] {
			to, _ := maint.Next()
			b.Steps = append(b.Steps, Step{Kind: StepMoveMaintainer, Changefeed: string(cf.ID), From: target, To: to,
				Reason: "least-loaded schedulable capture, counting moves already planned"})
		}
		p.Batches = append(p.Batches, b)
	}

	// Then the partitions, per changefeed: each maintainer moves its own
	// off the Draining capture, all changefeeds at once.
	var moves []Step
	// By reference: a copy of each of a million routing entries was
	// half of this function's time.
	byChangefeed := make(map[model.ChangefeedID][]*model.PartitionState, len(s.Changefeeds))
	for i := range s.Partitions {
		ps := &s.Partitions[i]
		byChangefeed[ps.Route.Changefeed] = append(byChangefeed[ps.Route.Changefeed], ps)
	}
	for _, cf := range s.Changefeeds {
		dest := NewDestinations(schedulable)
		for _, ps := range byChangefeed[cf.ID] {
			dest.Count(ps.Route.Node)
		}
		step := Step{Kind: StepMovePartitions, Changefeed: string(cf.ID), From: target, Spread: map[model.NodeID]int{},
			Reason: "its maintainer moves them off the Draining capture, each to the capture with the fewest of its partitions"}
		for _, ps := range byChangefeed[cf.ID] {
			if ps.Route.Node == target {
				to, _ := dest.Next()
				step.Count++
				step.Spread[to]++
			}
		}
		if step.Count > 0 {
			moves = append(moves, step)
		}
	}
	if len(moves) > 0 {
		p.Batches = append(p.Batches, Batch{Steps: moves})
	}
	p.Batches = append(p.Batches, Batch{Steps: []Step{{Kind: StepSetLiveness, To: target, Liveness: model.LivenessStopping.String(),
		Reason: "complete only when no maintainer and no partition is left on it"}}})
	return p.Batches
}
