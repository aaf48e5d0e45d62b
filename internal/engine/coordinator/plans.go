package coordinator

import (
	"context"
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
	if p.Target == "" { // a rollout names no one target
		return fmt.Sprintf("%s-%d%03d", p.Kind, now.UnixMilli(), planSeq.Add(1)%1000)
	}
	return fmt.Sprintf("%s-%s-%d%03d", p.Kind, p.Target, now.UnixMilli(), planSeq.Add(1)%1000)
}

// Submission is who submits a plan, and whether it starts paused.
type Submission struct {
	By     string
	Paused bool
	// Budget is the plan's lag budget (exec.Budget): checked here, held
	// to by the executor.
	Budget exec.Budget
}

// Submit takes a plan exactly as an operator approved it, whatever its
// kind, and refuses it if it is stale.
func (c *Coordinator) Submit(ctx context.Context, term election.Term, p *plan.Plan, sub Submission) (*exec.Record, error) {
	// A step its kind's driver has no code for would wait for ever.
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			if !p.Kind.Has(s.Kind) {
				return nil, &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("a %s plan cannot have %s steps", p.Kind, s.Kind),
					Hint: "compute the plan again with this cluster's cdcctl version (--dry-run --plan-out FILE)"}
			}
		}
	}
	switch p.Kind {
	case plan.KindDrain:
		rec, _, err := c.SubmitDrain(ctx, term, p.Target, p.BatchSize, p, sub)
		return rec, err
	case plan.KindMove, plan.KindSplit, plan.KindRebalance:
		return c.submitPartitionPlan(ctx, term, p, sub)
	case plan.KindRollout:
		return c.submitRollout(ctx, term, p, sub)
	}
	return nil, &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("this cluster cannot run %q plans", p.Kind),
		Hint: "compute the plan with this version's cdcctl (drain, partition move, partition split, rollout restart)"}
}

// loadChecked reads the cluster for a submission (the submitting lock
// held) and refuses p if anything it read has changed since.
func (c *Coordinator) loadChecked(ctx context.Context, p *plan.Plan) (*meta.State, model.Snapshot, error) {
	st, err := c.store.Load(ctx)
	if err != nil {
		return nil, model.Snapshot{}, err
	}
	snap := Snapshot(st)
	if changes := plan.Check(p, &snap); len(changes) > 0 {
		return nil, model.Snapshot{}, &plan.StaleError{Changes: changes}
	}
	return st, snap, nil
}

// saveSubmitted stores a plan just checked as its first record (under
// its lag budget, held if submitted paused); the submitting lock is held.
func (c *Coordinator) saveSubmitted(ctx context.Context, term election.Term, st *meta.State, p *plan.Plan, sub Submission) (*exec.Record, error) {
	now := time.Now().UTC()
	rec := exec.New(newPlanID(p, now), p, sub.By, now)
	rec.Budget = sub.Budget
	if sub.Paused {
		rec.Hold(now)
	}
	if _, err := NewPlanStore(c.store, term, st).Save(ctx, rec, 0); err != nil {
		return nil, err
	}
	c.log.Info("coordinator: plan submitted", "plan", rec.ID, "kind", p.Kind, "target", p.Target, "steps", len(rec.Steps), "by", sub.By, "paused", sub.Paused)
	return rec, nil
}

// refuseWhileDraining refuses a plan (what says which) while a drain or
// a rollout is not over: both hold the cluster's one drain record.
func refuseWhileDraining(ctx context.Context, st *meta.State, what string) error {
	others, _ := PlansIn(st).List(ctx) // one that does not decode holds nothing
	for _, other := range others {
		if id := other.ID; drains(other.Plan.Kind) && !other.State.Terminal() {
			return &plan.Refusal{Reason: plan.RefuseInProgress, Message: fmt.Sprintf("cannot %s: %s plan %s is still %s", what, other.Plan.Kind, id, other.State),
				Hint: fmt.Sprintf("wait for it ('cdcctl plan watch %s') or cancel it ('cdcctl plan cancel %s')", id, id)}
		}
	}
	return nil
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
	plans := NewPlanStore(c.store, term, st)
	now := func() time.Time { return time.Now().UTC() }
	drainer := &drainActuator{c: c, term: term}
	// A plan whose step failed waits for its other running steps only
	// while every node would know it waits (a coordinator of an older
	// version taking over would not).
	wait := c.view.AllNodesHave(model.FeaturePlanFailing)
	drain := &exec.Executor{Act: drainer, Now: now, StallAfter: c.StallAfter, Lag: planLag(st, now), WaitForRunning: wait, HoldOutlivesPlan: true}
	executors := map[plan.Kind]*exec.Executor{
		plan.KindDrain:   drain,
		plan.KindRollout: {Act: &rolloutActuator{drain: drainer}, Now: now, StallAfter: c.StallAfter, Lag: drain.Lag, WaitForRunning: wait, HoldOutlivesPlan: true},
	}
	parts := &exec.Executor{Act: &partitionActuator{c: c, term: term}, Now: now, StallAfter: c.StallAfter, Lag: drain.Lag, WaitForRunning: wait}
	for id, raw := range st.Plans {
		if mine.over[id] == raw.Revision {
			c.forgetPlanRequest(ctx, term, st, id)
			continue
		}
		var rec exec.Record
		revision := raw.Revision
		if s, ok := mine.plans[id]; ok && s.revision > raw.Revision {
			rec, revision = s.rec, s.revision
		} else if stored, ok, lerr := plans.Load(ctx, id); ok && lerr == nil {
			rec = *stored.Record
		} else {
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
		x, ok := executors[rec.Plan.Kind]
		if !ok {
			x = parts
		}
		evs, aerr := x.Advance(ctx, &rec, exec.Request(st.PlanRequests[id]))
		if drains(rec.Plan.Kind) {
			// A paused or held drain lets nothing more move off its
			// target (the maintainers read the drain record).
			aerr = errors.Join(aerr, c.syncDrainHold(ctx, term, st, &rec))
		}
		if len(evs) > 0 {
			if rev, serr := plans.Save(ctx, &rec, revision); serr != nil {
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
