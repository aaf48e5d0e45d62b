package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// submitPartitionPlan takes a move, split or rebalance plan: refused if
// stale, if seed 003's rules no longer hold, or if another plan that is
// not over works on one of its partitions.
func (c *Coordinator) submitPartitionPlan(ctx context.Context, term election.Term, p *plan.Plan, sub Submission) (*exec.Record, error) {
	c.submitting.Lock()
	defer c.submitting.Unlock()
	st, err := c.store.Load(ctx)
	if err != nil {
		return nil, err
	}
	snap := st.Snapshot()
	if changes := plan.Check(p, &snap); len(changes) > 0 {
		return nil, &plan.StaleError{Changes: changes}
	}
	mine := map[string]bool{}
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			switch s.Kind {
			case plan.StepMovePartition:
				if p.Kind == plan.KindMove {
					if _, err := plan.ValidateMove(&snap, s.Partition, s.To); err != nil {
						return nil, err
					}
				}
			case plan.StepSplitPartition:
				// The operator's text is validated; the encoded key the
				// routing table gets must be its encoding.
				text := s.Key
				if s.KeyText != "" {
					text = s.KeyText
				}
				pp, err := plan.ValidateSplit(&snap, s.Partition, text)
				if err != nil {
					return nil, err
				}
				if enc, _ := model.EncodeKey(pp.Route.Span.Key, text); enc != s.Key {
					return nil, &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("the split step of %s cuts at %q, which is not the encoding of %q", s.Partition, s.Key, text), Hint: "compute the plan with cdcctl"}
				}
			default:
				return nil, &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("a %s plan cannot have %s steps", p.Kind, s.Kind), Hint: "compute the plan with cdcctl"}
			}
			mine[s.Partition] = true
		}
	}
	for id, raw := range st.Plans {
		var other exec.Record
		if json.Unmarshal(raw.Value, &other) != nil || other.State.Terminal() {
			continue
		}
		for _, s := range other.Steps {
			step := other.Step(s)
			if mine[step.Partition] && (s.State == exec.StepPending || s.State == exec.StepRunning) {
				return nil, &plan.BusyError{Partition: step.Partition, Doing: fmt.Sprintf("plan %s (%s) still has to %s", id, other.State, plan.StepText(step)), Since: other.SubmittedAt}
			}
		}
	}
	now := time.Now().UTC()
	rec := exec.New(newPlanID(p, now), p, sub.By, now)
	if sub.Paused {
		rec.Hold(now)
	}
	if _, err := c.store.SavePlan(ctx, term.Fence, rec.ID, rec, 0); err != nil {
		return nil, err
	}
	c.log.Info("coordinator: plan submitted", "plan", rec.ID, "kind", p.Kind, "target", p.Target, "steps", len(rec.Steps), "by", sub.By, "paused", sub.Paused)
	return rec, nil
}

// partitionActuator carries out move, split and rebalance plans: the
// coordinator begins each step with one write to the routing entry; the
// changefeed's maintainer carries it through (seed 003's flows).
type partitionActuator struct {
	c    *Coordinator
	term election.Term
}

func (a *partitionActuator) route(s plan.Step) (meta.RouteRecord, bool) {
	r, ok := a.c.view.State().Partitions[model.ChangefeedID(s.Changefeed)][s.Partition]
	return r, ok
}

func (a *partitionActuator) Check(ctx context.Context, p *plan.Plan, s plan.Step, state exec.StepState, since time.Time) (exec.Outcome, error) {
	r, ok := a.route(s)
	if !ok {
		return exec.Outcome{Failed: fmt.Sprintf("partition %s is gone (its changefeed was removed?)", s.Partition)}, nil
	}
	st := a.c.view.State()
	route := r.Route
	switch s.Kind {
	case plan.StepMovePartition:
		if state == exec.StepPending {
			switch {
			case route.Node == s.To && route.Status == model.PartitionActive:
				return exec.Outcome{Done: true, Note: "already there"}, nil
			case route.Node != s.From:
				if p.Kind == plan.KindMove {
					return exec.Outcome{Failed: fmt.Sprintf("it moved to %s meanwhile", route.Node)}, nil
				}
				return exec.Outcome{Done: true, Note: fmt.Sprintf("skipped: the scheduler moved it to %s meanwhile", route.Node)}, nil
			case begun(route, s):
				return exec.Outcome{}, nil
			case route.Status == model.PartitionDraining:
				return exec.Outcome{Waiting: fmt.Sprintf("busy: moving %s → %s", route.Node, route.Target)}, nil
			case !st.IsSchedulable(s.To):
				if p.Kind == plan.KindMove {
					return exec.Outcome{Failed: fmt.Sprintf("%s can no longer take work", s.To)}, nil
				}
				if to, ok := leastLoaded(st, s.Changefeed); !ok || to == s.From {
					// Nowhere better to go: the partition staying where
					// it is is the rebalance's answer, not a step to wait
					// on for ever.
					return exec.Outcome{Done: true, Note: fmt.Sprintf("skipped: %s can no longer take work, and no other capture has fewer of the changefeed's partitions than %s; it stays there", s.To, s.From)}, nil
				}
				return exec.Outcome{Impossible: string(s.To) + " can no longer take work"}, nil
			}
			return exec.Outcome{}, nil
		}
		if route.Status != model.PartitionActive {
			return exec.Outcome{}, nil
		}
		if route.Node != s.To {
			why := "it went to " + string(route.Node) + " instead"
			if n := len(route.History); n > 0 && route.History[n-1].Kind == "returned" {
				why = "returned to " + string(route.Node) + ": " + route.History[n-1].Detail
			}
			if p.Kind == plan.KindMove {
				return exec.Outcome{Failed: "the move did not complete; " + why}, nil
			}
			return exec.Outcome{Done: true, Note: why}, nil
		}
		// Placed; done once the target runs it (seed 003's
		// PreparePartition succeeded): its first position is persisted.
		if pr := st.Progress[route.Changefeed][route.ID].Progress; pr.Node != s.To || pr.Epoch != route.Epoch {
			return exec.Outcome{}, nil
		}
		return exec.Outcome{Done: true, Note: fmt.Sprintf("running on %s after %s", s.To, time.Since(since).Round(time.Millisecond))}, nil
	case plan.StepSplitPartition:
		if state == exec.StepPending {
			if route.Status == model.PartitionDraining && !begun(route, s) {
				return exec.Outcome{Waiting: "busy: another operation is in progress"}, nil
			}
			return exec.Outcome{}, nil
		}
		if route.Status != model.PartitionActive {
			return exec.Outcome{}, nil
		}
		if route.Span.End != s.Key {
			return exec.Outcome{Failed: fmt.Sprintf("the partition is Active again but was not cut at %q", model.DecodeKey(route.Span.Key, s.Key))}, nil
		}
		note := "split"
		if n := len(route.History); n > 0 && route.History[n-1].Kind == "split" {
			note = "split " + route.History[n-1].Detail
		}
		return exec.Outcome{Done: true, Note: note}, nil
	}
	return exec.Outcome{}, fmt.Errorf("a %s plan has no %s steps", p.Kind, s.Kind)
}

func (a *partitionActuator) Begin(ctx context.Context, p *plan.Plan, s plan.Step) error {
	for attempt := 0; ; attempt++ {
		r, ok := a.route(s)
		if attempt > 0 {
			// The view may lag what this term just read or wrote.
			st, err := a.c.store.Load(ctx)
			if err != nil {
				return err
			}
			r, ok = st.Partitions[model.ChangefeedID(s.Changefeed)][s.Partition]
		}
		if !ok {
			return fmt.Errorf("partition %s is gone", s.Partition)
		}
		if begun(r.Route, s) {
			return nil // a previous coordinator wrote it and died before saving the step
		}
		if r.Route.Status == model.PartitionDraining || r.Route.Node != s.From {
			return fmt.Errorf("partition %s changed since the plan was checked: it is %s on %s", s.Partition, r.Route.Status, r.Route.Node)
		}
		now := time.Now().UTC()
		var err error
		switch s.Kind {
		case plan.StepMovePartition:
			err = a.c.store.RequestMove(ctx, a.term.Fence, r, s.To, p.Kind == plan.KindMove, now)
		case plan.StepSplitPartition:
			err = a.c.store.RequestSplit(ctx, a.term.Fence, r, s.Key, now)
		default:
			return fmt.Errorf("a %s plan has no %s steps", p.Kind, s.Kind)
		}
		if err == nil {
			a.c.log.Info("coordinator: partition operation begun", "plan", p.ID, "step", plan.StepText(s))
			a.awaitView(ctx, s, r.Revision)
			return nil
		}
		if !errors.Is(err, meta.ErrStale) || attempt == 2 {
			return err
		}
	}
}

// begun reports whether the entry already carries this step's request.
func begun(r model.RouteEntry, s plan.Step) bool {
	if r.Status != model.PartitionDraining {
		return false
	}
	if s.Kind == plan.StepSplitPartition {
		return r.SplitKey == s.Key
	}
	return r.SplitKey == "" && r.Target == s.To
}

// awaitView waits (briefly) until this node's view shows the entry past
// the revision the step's write replaced: the step's next check must not
// judge it from the entry as it was before (Active on its source would
// look like a move that ended elsewhere).
func (a *partitionActuator) awaitView(ctx context.Context, s plan.Step, replaced int64) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if r, ok := a.route(s); !ok || r.Revision > replaced {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.c.log.Warn("coordinator: the view did not show a partition write within 5s", "partition", s.Partition)
}

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

func (a *partitionActuator) Abandoned(context.Context, *exec.Record) (string, error) { return "", nil }

// Cancel has nothing to undo: a move or split that has begun finishes
// (stopping it halfway would be a second handover); the rest is skipped.
func (a *partitionActuator) Cancel(context.Context, *plan.Plan) error { return nil }
