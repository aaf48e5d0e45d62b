package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// submitPartitionPlan takes a move, split or rebalance plan (each step
// validated by its operation: move.go, split.go): refused if
// stale, if seed 003's rules no longer hold, or if another plan that is
// not over works on one of its partitions.
func (c *Coordinator) submitPartitionPlan(ctx context.Context, term election.Term, p *plan.Plan, sub Submission) (*exec.Record, error) {
	c.submitting.Lock()
	defer c.submitting.Unlock()
	st, snap, err := c.loadChecked(ctx, p)
	if err != nil {
		return nil, err
	}
	mine := map[string]bool{}
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			if err := validateStep(&snap, p.Kind, s); err != nil {
				return nil, err
			}
			mine[s.Partition] = true
		}
	}
	others, _ := PlansIn(st).List(ctx) // one that does not decode holds nothing
	for _, other := range others {
		if step, held := other.Holds(mine); held {
			return nil, &plan.BusyError{Partition: step.Partition, Doing: other.BusyMessage(step), Since: other.SubmittedAt}
		}
	}
	return c.saveSubmitted(ctx, term, st, p, sub)
}

// partitionActuator carries out move, split and rebalance plans: the
// coordinator begins each step with one write to the routing entry; the
// changefeed's maintainer carries it through (seed 003's flows). What is
// particular to each operation is in its own file: move.go, split.go,
// rebalance.go.
type partitionActuator struct {
	c    *Coordinator
	term election.Term
}

func (a *partitionActuator) route(s plan.Step) (meta.RouteRecord, bool) {
	r, ok := a.c.view.State().Partitions[model.ChangefeedID(s.Changefeed)][s.Partition]
	return r, ok
}

// removed says why a step's changefeed is no longer the one its plan
// read, or "": removed while the plan ran, or removed and created again
// under its name (its partitions may carry the same names, but they are
// not the ones the plan meant to move). Nothing of it is left to move or
// split, and the other changefeeds' steps go on.
func removed(st *meta.State, p *plan.Plan, s plan.Step) string {
	e, live := st.Changefeeds[model.ChangefeedID(s.Changefeed)]
	switch {
	case !live:
		return fmt.Sprintf("changefeed %s was removed", s.Changefeed)
	case p.Fingerprint.Revision > 0 && e.InfoCreated > int64(p.Fingerprint.Revision):
		return fmt.Sprintf("changefeed %s was removed and created again since the plan was computed; compute a plan for the new one if it needs one", s.Changefeed)
	}
	return ""
}

func (a *partitionActuator) Check(ctx context.Context, p *plan.Plan, s plan.Step, state exec.StepState, since time.Time) (exec.Outcome, error) {
	st := a.c.view.State()
	if why := removed(st, p, s); why != "" {
		return exec.Outcome{Skipped: why}, nil
	}
	r, ok := a.route(s)
	if !ok {
		return exec.Outcome{Failed: fmt.Sprintf("partition %s is gone (its table was removed from the changefeed, or the changefeed re-snapshotted, since the plan was computed)", s.Partition)}, nil
	}
	route := r.Route
	switch s.Kind {
	case plan.StepMovePartition:
		return checkMove(p, s, state, since, route, st), nil
	case plan.StepSplitPartition:
		return checkSplit(s, state, route), nil
	}
	return exec.Outcome{Failed: unknownStep(p, s)}, nil
}

// unknownStep says why a plan fails at a step this coordinator has no
// code for.
func unknownStep(p *plan.Plan, s plan.Step) string {
	return fmt.Sprintf("this coordinator carries out no %q steps of a %s plan (one stored by a coordinator of another version?); compute the plan again with this cluster's cdcctl version", s.Kind, p.Kind)
}

func (a *partitionActuator) Begin(ctx context.Context, p *plan.Plan, s plan.Step) error {
	for attempt := 0; ; attempt++ {
		st := a.c.view.State()
		if attempt > 0 {
			// The view may lag what this term just read or wrote.
			var err error
			if st, err = a.c.store.Load(ctx); err != nil {
				return err
			}
		}
		if why := removed(st, p, s); why != "" {
			// Removed between the step's check and now.
			return exec.Skip(why)
		}
		r, ok := st.Partitions[model.ChangefeedID(s.Changefeed)][s.Partition]
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
			err = a.requestMove(ctx, p, s, r, now)
		case plan.StepSplitPartition:
			err = a.requestSplit(ctx, s, r, now)
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
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := a.c.view.WaitFor(wctx, func(st *meta.State) bool {
		r, ok := st.Partitions[model.ChangefeedID(s.Changefeed)][s.Partition]
		return !ok || r.Revision > replaced
	})
	if err != nil && ctx.Err() == nil {
		a.c.log.Warn("coordinator: the view did not show a partition write within 5s", "partition", s.Partition)
	}
}

func (a *partitionActuator) Abandoned(context.Context, *exec.Record) (string, error) { return "", nil }

// Cancel has nothing to undo: a move or split that has begun finishes
// (stopping it halfway would be a second handover); the rest is skipped.
func (a *partitionActuator) Cancel(context.Context, *plan.Plan) error { return nil }

// validateStep checks one step of a partition plan against the state it
// is submitted to, by the rules of its operation.
func validateStep(snap *model.Snapshot, kind plan.Kind, s plan.Step) error {
	switch s.Kind {
	case plan.StepMovePartition:
		return validateMoveStep(snap, kind, s)
	case plan.StepSplitPartition:
		return validateSplitStep(snap, s)
	}
	return &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("a %s plan cannot have %s steps", kind, s.Kind), Hint: "compute the plan with cdcctl"}
}
