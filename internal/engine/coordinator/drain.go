package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// startDrainRecord begins the drain of target by plan p (a drain's
// first step, or a rollout's for each capture): the drain record, naming
// the plan, and the target's liveness Draining, in one fenced
// transaction. If the plan's record for target is already there (a new
// coordinator repeating the step), it does nothing.
func (c *Coordinator) startDrainRecord(ctx context.Context, term election.Term, st *meta.State, p *plan.Plan, target model.NodeID, hold string) (model.DrainRecord, error) {
	if st.Drain != nil && st.Drain.PlanID == p.ID && st.Drain.Target == target {
		return *st.Drain, nil
	}
	rec := model.DrainRecord{Target: target, BatchSize: p.BatchSize, StartTime: time.Now().UTC(), PlanID: p.ID, Hold: hold}
	maintainers, dispatchers := DrainProgress(st, target)
	rec.InitialMaintainerCount = maintainers
	for _, n := range dispatchers {
		rec.InitialDispatcherCount += n
	}
	if st.Drain != nil && st.Drain.Target == target {
		if prev, ok := planRecord(st, st.Drain.PlanID); ok && prev.State.Terminal() {
			// The drain's plan ended without finishing it (held past its
			// hold timeout, say): the drain submitted again takes it over,
			// its capture still Draining.
			rec, err := c.store.TakeOverDrain(ctx, term.Fence, st, rec)
			if err == nil {
				c.log.Info("coordinator: drain taken over", "target", target, "plan", p.ID, "from", prev.ID, "was", prev.State, "epoch", rec.Epoch)
			} else if now, lerr := c.store.Load(ctx); lerr == nil && now.Drain != nil && now.Drain.PlanID == p.ID && now.Drain.Target == target {
				return *now.Drain, nil // the executor and the request both take the step
			}
			return rec, err
		}
	}
	rec, err := c.store.StartDrain(ctx, term.Fence, rec)
	if err != nil && !errors.Is(err, meta.ErrFenced) {
		// The executor and the submitting request both take this step;
		// whichever came second finds the plan's own record.
		if now, lerr := c.store.Load(ctx); lerr == nil && now.Drain != nil && now.Drain.PlanID == p.ID && now.Drain.Target == target {
			return *now.Drain, nil
		} else if lerr == nil && now.Drain == nil && drainStepTaken(now, p.ID, target) {
			// The executor took the step and the drain is already over (a
			// capture with little on it): the record is gone again.
			if epoch, eerr := c.store.DrainEpoch(ctx); eerr == nil {
				rec.Epoch = epoch
				return rec, nil
			}
		}
	}
	if err != nil {
		return rec, err
	}
	c.log.Info("coordinator: drain started", "target", target, "plan", p.ID, "epoch", rec.Epoch, "batch", p.BatchSize,
		"maintainers", rec.InitialMaintainerCount, "dispatchers", rec.InitialDispatcherCount)
	return rec, nil
}

// drainStepTaken says a plan's step that drains target (the drain
// record) has run: the plan is done or that step started.
func drainStepTaken(st *meta.State, planID string, target model.NodeID) bool {
	r, ok := planRecord(st, planID)
	if !ok {
		return false
	}
	if r.State == exec.Done {
		return true
	}
	for _, s := range r.Steps {
		if step := r.Step(s); step.Kind == plan.StepSetLiveness && step.To == target && step.Liveness == model.LivenessDraining.String() {
			return s.Started != nil
		}
	}
	return false
}

// DrainProgress counts what is left on the drain's target.
func DrainProgress(st *meta.State, target model.NodeID) (maintainers int, dispatchers map[model.ChangefeedID]int) {
	dispatchers = map[model.ChangefeedID]int{}
	for _, id := range st.ChangefeedIDs() {
		if st.Changefeeds[id].Maintainer.Node == target {
			maintainers++
		}
		if n := st.ChangefeedPartitionsOn(id, target); n > 0 {
			dispatchers[id] = n
		}
	}
	return maintainers, dispatchers
}

// driveDrain completes the drain in progress: when nothing is left on
// the target it goes Stopping and the record is cleared; when the target
// is gone the record is cleared. Its plan moves the maintainers.
func (c *Coordinator) driveDrain(ctx context.Context, term election.Term, st *meta.State) error {
	if st.Drain == nil {
		return nil
	}
	target := st.Drain.Target
	if _, alive := st.Nodes[target]; !alive {
		// Seed 000 scenario 4: the draining node is gone; its work is
		// rescheduled like any dead node's; the drain is over.
		c.log.Warn("coordinator: the draining capture is gone; drain ends", "target", target)
		return c.store.FinishDrain(ctx, term.Fence, st)
	}
	if st.Drain.Hold != "" {
		return nil // Stopping waits for the plan to go on
	}
	maintainers, dispatchers := DrainProgress(st, target)
	remaining := 0
	for _, n := range dispatchers {
		remaining += n
	}
	if maintainers > 0 || remaining > 0 {
		return nil
	}
	if err := c.store.FinishDrain(ctx, term.Fence, st); err != nil {
		return err
	}
	c.log.Info("coordinator: drain complete; target is Stopping", "target", target, "took", time.Since(st.Drain.StartTime).Round(time.Millisecond))
	return nil
}

// SubmitDrain validates a drain plan against the current state (stale
// objects refused with *plan.StaleError; seed 000's error table with
// *plan.Refusal), stores its record, and leaves it to the executor. With
// approved nil the plan is computed here, from the same snapshot.
//
// The plan's first step (the drain record and Draining) is taken at once,
// so the answer carries the drain's epoch, and a concurrent drain is
// refused by etcd. Submitted paused, the first step is taken all the
// same: the capture is Draining, and the plan's own steps wait.
func (c *Coordinator) SubmitDrain(ctx context.Context, term election.Term, target model.NodeID, batch int, approved *plan.Plan, sub Submission) (*exec.Record, model.DrainRecord, error) {
	c.submitting.Lock()
	defer c.submitting.Unlock()
	st, err := c.store.Load(ctx)
	if err != nil {
		return nil, model.DrainRecord{}, err
	}
	snap := Snapshot(st)
	p := approved
	if p != nil {
		if p.Kind != plan.KindDrain || p.Target != target {
			return nil, model.DrainRecord{}, &plan.Refusal{Reason: plan.RefuseInvalid,
				Message: fmt.Sprintf("the plan is a %s plan of %q, not a drain of %s", p.Kind, p.Target, target),
				Hint:    "submit it with 'cdcctl plan apply FILE'"}
		}
		if changes := plan.Check(p, &snap); len(changes) > 0 {
			return nil, model.DrainRecord{}, &plan.StaleError{Changes: changes}
		}
		if err := plan.ValidateDrain(&snap, target); err != nil {
			return nil, model.DrainRecord{}, err
		}
	} else if p, err = plan.Drain(&snap, target, batch, plan.DefaultCosts); err != nil {
		return nil, model.DrainRecord{}, err
	}
	if err := refuseWhileDraining(ctx, st, "drain "+string(target)); err != nil {
		return nil, model.DrainRecord{}, err
	}
	rec, err := c.saveSubmitted(ctx, term, st, p, sub)
	if err != nil {
		return nil, model.DrainRecord{}, err
	}
	drain, err := c.startDrainRecord(ctx, term, st, &rec.Plan, target, initialHold(rec))
	if err != nil {
		// The executor would fail the plan at its first step; say why now.
		_ = c.store.RequestPlan(ctx, term.Fence, rec.ID, string(exec.RequestCancel))
		return nil, model.DrainRecord{}, err
	}
	return rec, drain, nil
}

// drainActuator carries out a drain plan's steps on the cluster.
type drainActuator struct {
	c    *Coordinator
	term election.Term
}

// maintainerSettle is how long a moved maintainer counts as in flight: the
// new maintainer reads the routing table and starts moving its partitions
// within it. A batch's next begins after it.
const maintainerSettle = time.Second

func (a *drainActuator) Check(ctx context.Context, p *plan.Plan, s plan.Step, state exec.StepState, since time.Time) (exec.Outcome, error) {
	st := a.c.view.State()
	switch s.Kind {
	case plan.StepSetLiveness:
		// The step names its capture (a rollout drains several).
		target := s.To
		_, present := st.Nodes[target]
		l := st.LivenessOf(target)
		ours := st.Drain != nil && st.Drain.PlanID == p.ID && st.Drain.Target == target
		if s.Liveness == model.LivenessDraining.String() {
			return exec.Outcome{Done: (ours && l == model.LivenessDraining) || !present || (l == model.LivenessStopping && st.Drain == nil)}, nil
		}
		// Stopping: the drain completes when nothing is left on the target.
		return exec.Outcome{Done: !present || (l == model.LivenessStopping && !ours)}, nil
	case plan.StepMoveMaintainer:
		e := st.Changefeeds[model.ChangefeedID(s.Changefeed)]
		if e == nil {
			// Removed: nothing of it is left on the target.
			return exec.Outcome{Skipped: fmt.Sprintf("changefeed %s was removed", s.Changefeed)}, nil
		}
		if e.Maintainer.Node != s.From {
			// Moved, by this step or anything else.
			return exec.Outcome{Done: state == exec.StepPending || time.Since(since) >= maintainerSettle}, nil
		}
		if state == exec.StepPending && !st.IsSchedulable(s.To) {
			return exec.Outcome{Impossible: string(s.To) + " can no longer take work"}, nil
		}
		return exec.Outcome{}, nil
	case plan.StepMovePartitions:
		if st.Changefeeds[model.ChangefeedID(s.Changefeed)] == nil {
			return exec.Outcome{Skipped: fmt.Sprintf("changefeed %s was removed", s.Changefeed)}, nil
		}
		for _, r := range st.Partitions[model.ChangefeedID(s.Changefeed)] {
			if r.Route.Node == s.From {
				return exec.Outcome{}, nil
			}
		}
		return exec.Outcome{Done: true}, nil
	}
	// A step this version has no code for (a plan stored by a newer
	// coordinator, taken over after a failover) fails the plan: waiting
	// left it Running for ever.
	return exec.Outcome{Failed: unknownStep(p, s)}, nil
}

func (a *drainActuator) Begin(ctx context.Context, p *plan.Plan, s plan.Step) error {
	st := a.c.view.State()
	switch s.Kind {
	case plan.StepSetLiveness:
		if s.Liveness == model.LivenessDraining.String() {
			hold := ""
			if r, ok := planRecord(st, p.ID); ok {
				hold = initialHold(r)
			}
			_, err := a.c.startDrainRecord(ctx, a.term, st, p, s.To, hold)
			return err
		}
		// Completed by driveDrain once nothing is left. A maintainer
		// placed on the target after the plan was computed and before
		// the target went Draining (a changefeed created meanwhile, or a
		// rollout's earlier drain) has no step of the plan: it moves now,
		// or the drain would wait for it for ever.
		return a.moveUnplanned(ctx, s.To)
	case plan.StepMoveMaintainer:
		e := st.Changefeeds[model.ChangefeedID(s.Changefeed)]
		if e == nil || e.Maintainer.Node != s.From {
			return nil
		}
		to := s.To
		if now := time.Now(); maintainerExcluded(e, to, now) {
			// Its maintainer could not start there lately (scenario 6):
			// the least-loaded capture it may go to instead.
			dest := plan.NewDestinations(st.SchedulableNodeIDs())
			for _, id := range st.ChangefeedIDs() {
				dest.Count(st.Changefeeds[id].Maintainer.Node)
			}
			if other, ok := dest.NextExcept(func(n model.NodeID) bool { return n == s.From || maintainerExcluded(e, n, now) }); ok {
				a.c.log.Info("coordinator: drain moves a maintainer elsewhere; it could not start on the planned capture lately", "changefeed", s.Changefeed, "planned", to, "to", other)
				to = other
			}
		}
		err := a.c.store.PlaceMaintainer(ctx, a.term.Fence, e, to)
		if errors.Is(err, meta.ErrStale) {
			return nil // it moved meanwhile; Check will see
		}
		if err == nil {
			a.c.log.Info("coordinator: drain moved a maintainer", "changefeed", s.Changefeed, "from", s.From, "to", to)
		}
		return err
	}
	return nil // partitions: their maintainers move them
}

// moveUnplanned moves the maintainers still on a drain's target once its
// planned maintainer moves are done, each to the least-loaded capture it
// may go to.
func (a *drainActuator) moveUnplanned(ctx context.Context, target model.NodeID) error {
	st := a.c.view.State()
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	var left []*meta.ChangefeedEntry
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		if e.Maintainer.Node == target {
			left = append(left, e)
		} else {
			dest.Count(e.Maintainer.Node)
		}
	}
	now := time.Now()
	for _, e := range left {
		to, ok := dest.NextExcept(func(n model.NodeID) bool { return n == target || maintainerExcluded(e, n, now) })
		if !ok {
			return nil // nowhere to go: the drain waits, as its stall event says
		}
		err := a.c.store.PlaceMaintainer(ctx, a.term.Fence, e, to)
		if errors.Is(err, meta.ErrStale) {
			continue // it moved meanwhile
		}
		if err != nil {
			return err
		}
		a.c.log.Info("coordinator: drain moved a maintainer its plan did not list (placed on the target after the plan was computed)", "changefeed", e.Info.ID, "from", target, "to", to)
	}
	return nil
}

func (a *drainActuator) Replan(ctx context.Context, p *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	if s.Kind != plan.StepMoveMaintainer {
		return s, false, nil
	}
	st := a.c.view.State()
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	for _, id := range st.ChangefeedIDs() {
		dest.Count(st.Changefeeds[id].Maintainer.Node)
	}
	to, ok := dest.Next()
	if !ok {
		return s, false, nil
	}
	s.To, s.Reason = to, "re-planned: least-loaded schedulable capture now"
	return s, true, nil
}

func (a *drainActuator) Abandoned(ctx context.Context, r *exec.Record) (string, error) {
	st := a.c.view.State()
	if st.Drain != nil && st.Drain.PlanID != r.ID {
		// A drain whose plan ended is taken over by this plan's first
		// step (startDrainRecord); any other holds the record.
		if prev, ok := planRecord(st, st.Drain.PlanID); !ok || !prev.State.Terminal() || st.Drain.Target != r.Plan.Target {
			return fmt.Sprintf("another drain (%s) holds the drain record", st.Drain.PlanID), nil
		}
	}
	// Seed 000's only-node-left case: the last capture, Draining, went
	// back to Alive and its drain record was cleared.
	started := len(r.Steps) > 0 && r.Steps[0].State == exec.StepDone
	if _, registered := st.Nodes[r.Plan.Target]; started && st.Drain == nil && !registered {
		// Seed 000's scenario 4: the draining capture died; its work was
		// placed on the others, and the drain ended with it.
		return fmt.Sprintf("%s is gone (it crashed or left while draining): the drain ended with it, and its work was placed on the other captures", r.Plan.Target), nil
	}
	if started && st.Drain == nil && st.LivenessOf(r.Plan.Target) == model.LivenessAlive {
		return fmt.Sprintf("%s is Alive again and its drain record is gone: it was the only capture left, so it took its work back", r.Plan.Target), nil
	}
	return "", nil
}

// Cancel clears the drain's record. The capture stays Draining (seed 000
// has no way back to Alive but a restart of its process); what is left on
// it moves off through the normal schedulers, without batches.
func (a *drainActuator) Cancel(ctx context.Context, p *plan.Plan) error {
	st := a.c.view.State()
	if st.Drain == nil || st.Drain.PlanID != p.ID {
		return nil
	}
	return a.c.store.ClearDrain(ctx, a.term.Fence, st)
}

// drains says a plan of this kind holds the cluster's one drain record
// while it runs: a drain, and a rollout (each capture in turn).
func drains(k plan.Kind) bool { return k == plan.KindDrain || k == plan.KindRollout }

// drainHold is why a drain's plan lets nothing more move off its target
// (model.DrainRecord.Hold), "" when it runs: paused, held by its lag
// budget (also before the budget was first checked, and after it failed
// the plan: the drain submitted again takes over from there).
func drainHold(r *exec.Record) string {
	switch {
	case r.State == exec.Paused:
		return "its plan " + r.ID + " is paused"
	case r.Held != nil:
		return "its plan " + r.ID + " is held by its lag budget"
	case r.State == exec.Failed && strings.HasPrefix(r.Message, exec.HoldTimeoutPrefix):
		return "its plan " + r.ID + " failed, held by its lag budget past its hold timeout"
	}
	return ""
}

// initialHold is a drain record's hold when it is written: its plan's,
// and with a lag budget not yet checked, held until the coordinator's
// next pass over the plan checks it.
func initialHold(r *exec.Record) string {
	if h := drainHold(r); h != "" {
		return h
	}
	if r.Budget.On() && r.State == exec.Running {
		return "its plan " + r.ID + " checks its lag budget first"
	}
	return ""
}

// syncDrainHold keeps the drain record's hold as its plan's state says.
func (c *Coordinator) syncDrainHold(ctx context.Context, term election.Term, st *meta.State, r *exec.Record) error {
	if st.Drain == nil || st.Drain.PlanID != r.ID {
		return nil
	}
	want := drainHold(r)
	if st.Drain.Hold == want {
		return nil
	}
	if err := c.store.SetDrainHold(ctx, term.Fence, st, want); err != nil {
		if errors.Is(err, meta.ErrStale) {
			return nil // written meanwhile: the next pass sees it
		}
		return err
	}
	c.log.Info("coordinator: drain hold", "target", st.Drain.Target, "plan", r.ID, "hold", want)
	return nil
}
