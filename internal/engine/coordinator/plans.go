package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

var planSeq atomic.Uint64

// newPlanID names a plan after its kind, target and submission time; a
// counter keeps two submissions in one millisecond apart.
func newPlanID(p *plan.Plan, now time.Time) string {
	return fmt.Sprintf("%s-%s-%d%03d", p.Kind, p.Target, now.UnixMilli(), planSeq.Add(1)%1000)
}

// Submission is who submits a plan, and whether it starts paused.
type Submission struct {
	By     string
	Paused bool
}

// Submit takes a plan exactly as an operator approved it, whatever its
// kind, and refuses it if it is stale.
func (c *Coordinator) Submit(ctx context.Context, term election.Term, p *plan.Plan, sub Submission) (*exec.Record, error) {
	switch p.Kind {
	case "drain":
		rec, _, err := c.SubmitDrain(ctx, term, p.Target, p.BatchSize, p, sub)
		return rec, err
	case plan.KindMove, plan.KindSplit, plan.KindRebalance:
		return c.submitPartitionPlan(ctx, term, p, sub)
	}
	return nil, &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("this cluster cannot run %q plans", p.Kind),
		Hint: "compute the plan with this version's cdcctl (drain, partition move, partition split)"}
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
	snap := st.Snapshot()
	p := approved
	if p != nil {
		if p.Kind != "drain" || p.Target != target {
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
	for id, raw := range st.Plans {
		var other exec.Record
		if json.Unmarshal(raw.Value, &other) == nil && other.Plan.Kind == "drain" && !other.State.Terminal() {
			return nil, model.DrainRecord{}, &plan.Refusal{Reason: plan.RefuseInProgress, Message: fmt.Sprintf("cannot drain %s: drain plan %s of %s is still %s", target, id, other.Plan.Target, other.State),
				Hint: fmt.Sprintf("wait for it ('cdcctl plan watch %s') or cancel it ('cdcctl plan cancel %s')", id, id)}
		}
	}
	now := time.Now().UTC()
	rec := exec.New(newPlanID(p, now), p, sub.By, now)
	if sub.Paused {
		rec.Hold(now)
	}
	if _, err := c.store.SavePlan(ctx, term.Fence, rec.ID, rec, 0); err != nil {
		return nil, model.DrainRecord{}, err
	}
	c.log.Info("coordinator: plan submitted", "plan", rec.ID, "kind", p.Kind, "target", p.Target, "batches", len(p.Batches), "by", sub.By, "paused", sub.Paused)
	drain, err := c.startDrainRecord(ctx, term, st, &rec.Plan)
	if err != nil {
		// The executor would fail the plan at its first step; say why now.
		_ = c.store.RequestPlan(ctx, term.Fence, rec.ID, string(exec.RequestCancel))
		return nil, model.DrainRecord{}, err
	}
	return rec, drain, nil
}

// RequestPlan records an operator's pause, resume or cancel of a plan.
func (c *Coordinator) RequestPlan(ctx context.Context, term election.Term, id string, req exec.Request) error {
	return c.store.RequestPlan(ctx, term.Fence, id, string(req))
}

// saved is what one term last wrote of each plan. The view may not show
// a write yet, and advancing an older record would repeat its steps'
// effects; the term is the record's only writer, so what it saved is the
// truth until the view catches up. over remembers the revisions of plans
// found finished, so that a long history is not decoded on every pass.
type saved struct {
	plans map[string]savedPlan
	over  map[string]int64
	// ended: a plan ended since the history was last pruned.
	ended *bool
}

func newSaved() saved {
	return saved{plans: map[string]savedPlan{}, over: map[string]int64{}, ended: new(bool)}
}

type savedPlan struct {
	rec      exec.Record
	revision int64
}

// runPlans advances every plan that is not over, and stores what changed.
func (c *Coordinator) runPlans(ctx context.Context, term election.Term, st *meta.State, mine saved) (active bool, err error) {
	drain := &exec.Executor{Act: &drainActuator{c: c, term: term}, Now: func() time.Time { return time.Now().UTC() }, StallAfter: c.StallAfter}
	parts := &exec.Executor{Act: &partitionActuator{c: c, term: term}, Now: drain.Now, StallAfter: c.StallAfter}
	for id, raw := range st.Plans {
		if mine.over[id] == raw.Revision {
			c.forgetPlanRequest(ctx, term, st, id)
			continue
		}
		var rec exec.Record
		revision := raw.Revision
		if s, ok := mine.plans[id]; ok && s.revision > raw.Revision {
			rec, revision = s.rec, s.revision
		} else if jerr := json.Unmarshal(raw.Value, &rec); jerr != nil {
			continue
		}
		if rec.State.Terminal() {
			if revision == raw.Revision {
				mine.over[id] = raw.Revision
			}
			c.forgetPlanRequest(ctx, term, st, id)
			continue
		}
		active = true
		x := drain
		if rec.Plan.Kind != "drain" {
			x = parts
		}
		evs, aerr := x.Advance(ctx, &rec, exec.Request(st.PlanRequests[id]))
		if len(evs) > 0 {
			if rev, serr := c.store.SavePlan(ctx, term.Fence, id, &rec, revision); serr != nil {
				aerr = errors.Join(aerr, serr)
			} else {
				mine.plans[id] = savedPlan{rec: rec, revision: rev}
				for _, ev := range evs {
					if ev.Type.Terminal() {
						*mine.ended = true
					}
					if ev.Type != exec.EventStep {
						c.log.Info("coordinator: plan event", "plan", id, "type", ev.Type, "message", ev.Message)
					}
				}
			}
		}
		if aerr != nil && err == nil {
			err = aerr
		}
	}
	return active, err
}

// forgetPlanRequest deletes the request left for a plan that is over (a
// cancel that ended it), so that nothing of it stays in etcd for ever;
// a failed delete is tried again on the next pass.
func (c *Coordinator) forgetPlanRequest(ctx context.Context, term election.Term, st *meta.State, id string) {
	if _, asked := st.PlanRequests[id]; !asked {
		return
	}
	if err := c.store.ForgetPlanRequest(ctx, term.Fence, id); err != nil {
		c.log.Debug("coordinator: could not delete a finished plan's request; next pass", "plan", id, "err", err)
	}
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
	target := p.Target
	_, present := st.Nodes[target]
	switch s.Kind {
	case plan.StepSetLiveness:
		l := st.LivenessOf(target)
		if s.Liveness == model.LivenessDraining.String() {
			ours := st.Drain != nil && st.Drain.PlanID == p.ID
			return exec.Outcome{Done: (ours && l == model.LivenessDraining) || !present || (l == model.LivenessStopping && st.Drain == nil)}, nil
		}
		// Stopping: the drain completes when nothing is left on the target.
		return exec.Outcome{Done: !present || (l == model.LivenessStopping && (st.Drain == nil || st.Drain.PlanID != p.ID))}, nil
	case plan.StepMoveMaintainer:
		e := st.Changefeeds[model.ChangefeedID(s.Changefeed)]
		if e == nil || e.Maintainer.Node != s.From {
			// Moved (by this step or anything else), or the changefeed is gone.
			return exec.Outcome{Done: state == exec.StepPending || time.Since(since) >= maintainerSettle}, nil
		}
		if state == exec.StepPending && !st.IsSchedulable(s.To) {
			return exec.Outcome{Impossible: string(s.To) + " can no longer take work"}, nil
		}
		return exec.Outcome{}, nil
	case plan.StepMovePartitions:
		for _, r := range st.Partitions[model.ChangefeedID(s.Changefeed)] {
			if r.Route.Node == s.From {
				return exec.Outcome{}, nil
			}
		}
		return exec.Outcome{Done: true}, nil
	}
	return exec.Outcome{}, fmt.Errorf("a drain plan has no %s steps", s.Kind)
}

func (a *drainActuator) Begin(ctx context.Context, p *plan.Plan, s plan.Step) error {
	st := a.c.view.State()
	switch s.Kind {
	case plan.StepSetLiveness:
		if s.Liveness == model.LivenessDraining.String() {
			_, err := a.c.startDrainRecord(ctx, a.term, st, p)
			return err
		}
		return nil // completed by driveDrain once nothing is left
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
		return fmt.Sprintf("another drain (%s) holds the drain record", st.Drain.PlanID), nil
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
