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

// submitRollout takes a rolling restart (plan.Rollout): refused if stale,
// if its captures can no longer be restarted one by one, or while a drain
// or another rollout runs (both hold the cluster's one drain record).
func (c *Coordinator) submitRollout(ctx context.Context, term election.Term, p *plan.Plan, sub Submission) (*exec.Record, error) {
	c.submitting.Lock()
	defer c.submitting.Unlock()
	st, snap, err := c.loadChecked(ctx, p)
	if err != nil {
		return nil, err
	}
	if _, err := plan.Rollout(&snap, p.RolloutCaptures(), p.BatchSize, plan.DefaultCosts); err != nil {
		return nil, err
	}
	if err := refuseWhileDraining(ctx, st, "restart captures"); err != nil {
		return nil, err
	}
	return c.saveSubmitted(ctx, term, st, p, sub)
}

// rolloutActuator carries out a rolling restart: each capture's drain
// steps are a drain's (drainActuator, the step naming its capture); the
// rollout's own are handing the coordinator role over, the restart, and
// waiting for the capture to be given work again.
type rolloutActuator struct {
	drain *drainActuator
}

func (a *rolloutActuator) Check(ctx context.Context, p *plan.Plan, s plan.Step, state exec.StepState, since time.Time) (exec.Outcome, error) {
	st := a.drain.c.view.State()
	switch s.Kind {
	case plan.StepResign:
		if _, present := st.Nodes[s.To]; !present {
			return exec.Outcome{Done: true, Note: string(s.To) + " is not running"}, nil
		}
		leader, ok := st.Leader()
		if ok && leader.Node != s.To {
			return exec.Outcome{Done: true}, nil
		}
		return exec.Outcome{}, nil
	case plan.StepRestart:
		return checkRestart(st, p, s, state), nil
	case plan.StepAwaitWork:
		if _, present := st.Nodes[s.To]; !present {
			return exec.Outcome{Failed: string(s.To) + " left again after its restart; see 'cdcctl capture get " + string(s.To) + "' and its logs"}, nil
		}
		if state == exec.StepPending {
			return exec.Outcome{}, nil // Begin forgets the request first
		}
		if cf, short := owedWork(st, s.To); short > 0 {
			return exec.Outcome{Waiting: fmt.Sprintf("the balance scheduler still owes it %d partitions of %s", short, cf)}, nil
		}
		return exec.Outcome{Done: true}, nil
	}
	return a.drain.Check(ctx, p, s, state, since)
}

// HookWaiting is why a rollout upgrade's restart step waits while its
// capture runs as the incarnation the plan drained.
const HookWaiting = "drained; waiting for the rollout's hook to restart it (the cdcctl that runs 'rollout upgrade --exec', or 'cdcctl plan watch ID --exec CMD' if that one is gone)"

// checkRestart: done once the capture is back Alive as another
// incarnation than the one asked to restart.
func checkRestart(st *meta.State, p *plan.Plan, s plan.Step, state exec.StepState) exec.Outcome {
	e, present := st.Nodes[s.To]
	req, asked := st.Restarts[s.To]
	asked = asked && req.Request.PlanID == p.ID
	alive := present && st.LivenessOf(s.To) == model.LivenessAlive
	switch {
	case state == exec.StepPending:
		// A coordinator that asked and died before it saved the step.
		return exec.Outcome{Done: asked && alive && e.Info.Incarnation != req.Request.Incarnation}
	case !present:
		return exec.Outcome{Waiting: "it has stopped; waiting for its service manager to start it again (systemd Restart=, compose restart:, Kubernetes)"}
	case asked && e.Info.Incarnation == req.Request.Incarnation && req.Request.ByHook:
		return exec.Outcome{Waiting: HookWaiting}
	case asked && e.Info.Incarnation == req.Request.Incarnation:
		return exec.Outcome{Waiting: "asked to restart; it is still running"}
	case alive && !asked:
		return exec.Outcome{Done: true, Note: "it had restarted already (it was not running when asked)"}
	case alive:
		return exec.Outcome{Done: true}
	}
	return exec.Outcome{Waiting: fmt.Sprintf("back as a new incarnation, %s", st.LivenessOf(s.To))}
}

// owedWork finds a changefeed whose partitions the balance scheduler
// would still move to id: another capture holds more than one more of
// them than id does (its rule; pinned partitions stay where they are).
// short is how many it is owed, 0 when it has its share everywhere.
func owedWork(st *meta.State, id model.NodeID) (cf model.ChangefeedID, short int) {
	for _, c := range st.ChangefeedIDs() {
		counts := map[model.NodeID]int{}
		for _, r := range st.Partitions[c] {
			if !r.Route.Pinned && st.IsSchedulable(r.Route.Node) {
				counts[r.Route.Node]++
			}
		}
		most := 0
		for _, n := range counts {
			most = max(most, n)
		}
		if most-counts[id] > 1 {
			return c, (most - counts[id]) / 2
		}
	}
	return "", 0
}

func (a *rolloutActuator) Begin(ctx context.Context, p *plan.Plan, s plan.Step) error {
	c := a.drain.c
	switch s.Kind {
	case plan.StepResign:
		if a.drain.term.Leader == s.To {
			// This coordinator runs on the capture: it steps down, and the
			// next coordinator carries the plan on from its record.
			c.log.Info("coordinator: stepping down; a rollout restarts this capture", "plan", p.ID)
			a.drain.term.StepDown()
		}
		return nil
	case plan.StepRestart:
		return a.requestRestart(ctx, p, s.To)
	case plan.StepAwaitWork:
		if _, asked := c.view.State().Restarts[s.To]; asked {
			return c.store.ForgetRestart(ctx, a.drain.term.Fence, s.To)
		}
		return nil
	}
	return a.drain.Begin(ctx, p, s)
}

// requestRestart asks the capture's running incarnation to restart. One
// not running is left alone: the step is done when it is back.
func (a *rolloutActuator) requestRestart(ctx context.Context, p *plan.Plan, id model.NodeID) error {
	c := a.drain.c
	for attempt := 0; ; attempt++ {
		st := c.view.State()
		if attempt > 0 {
			var err error
			if st, err = c.store.Load(ctx); err != nil {
				return err
			}
		}
		e, present := st.Nodes[id]
		if !present {
			return nil
		}
		if r, ok := st.Restarts[id]; ok && r.Request.PlanID == p.ID && r.Request.Incarnation == e.Info.Incarnation {
			return nil // asked already
		}
		err := c.store.RequestRestart(ctx, a.drain.term.Fence, model.RestartRequest{Node: id, Incarnation: e.Info.Incarnation, PlanID: p.ID, RequestedAt: time.Now().UTC(),
			ByHook: p.RestartBy == plan.RestartByHook})
		if err == nil {
			c.log.Info("coordinator: asked a capture to restart", "plan", p.ID, "capture", id, "incarnation", fmt.Sprintf("%x", e.Info.Incarnation), "by_hook", p.RestartBy == plan.RestartByHook)
			return nil
		}
		if !errors.Is(err, meta.ErrStale) || attempt == 2 {
			return err
		}
	}
}

func (a *rolloutActuator) Replan(ctx context.Context, p *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	return a.drain.Replan(ctx, p, s)
}

// Abandoned: a rollout ends only by its steps (a capture that does not
// come back stalls it, with the reason, until it does or is cancelled).
func (a *rolloutActuator) Abandoned(context.Context, *exec.Record) (string, error) { return "", nil }

// Cancel clears the drain record if the rollout holds it (the capture it
// was draining stays Draining until its process restarts, as after a
// cancelled drain) and its restart request.
func (a *rolloutActuator) Cancel(ctx context.Context, p *plan.Plan) error {
	c := a.drain.c
	err := a.drain.Cancel(ctx, p)
	for id, r := range c.view.State().Restarts {
		if r.Request.PlanID == p.ID {
			err = errors.Join(err, c.store.ForgetRestart(ctx, a.drain.term.Fence, id))
		}
	}
	return err
}
