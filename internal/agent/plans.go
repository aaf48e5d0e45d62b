package agent

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func planNotFound(id string) error {
	return api.Errorf(api.CodeNotFound, "list the plans with 'cdcctl plan list'", "plan %q not found", id)
}

func (b backend) Plans(ctx context.Context) (*api.PlanList, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	out := &api.PlanList{Version: api.SchemaVersion, Plans: []api.PlanSummary{}}
	plans, err := coordinator.PlansIn(st).List(ctx)
	if err != nil {
		b.n.log.Warn("stored plans that do not decode are left out", "err", err)
	}
	for _, r := range plans {
		out.Plans = append(out.Plans, api.PlanSummary{ID: r.ID, Kind: r.Plan.Kind, Target: string(r.Plan.Target), State: r.State,
			Steps: r.Counts(), SubmittedBy: r.SubmittedBy, SubmittedAt: r.SubmittedAt.Format(time.RFC3339), Message: r.Message})
	}
	sort.Slice(out.Plans, func(i, j int) bool { return out.Plans[i].SubmittedAt > out.Plans[j].SubmittedAt })
	return out, nil
}

func (b backend) Plan(ctx context.Context, id string) (*api.PlanResponse, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	rec, ok, err := coordinator.PlansIn(st).Load(ctx, id)
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "see the agent's log", "%v", err)
	}
	if !ok {
		return nil, planNotFound(id)
	}
	out := api.PlanOf(rec.Record, exec.Request(st.PlanRequests[id]))
	return out, nil
}

// WaitPlan waits on this node's view until plan id's record holds an
// event after seq or has ended (or is gone), then reads it.
func (b backend) WaitPlan(ctx context.Context, id string, seq uint64) (*api.PlanResponse, error) {
	_, inc := b.n.current()
	if inc == nil {
		return nil, errNotJoined
	}
	// Bounded: a view replaced by a new membership (a lost session)
	// changes no more, and the stream must not hang on it.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	checked := int64(-1) // the record's revision last decoded here
	err := inc.View.WaitFor(wctx, func(st *meta.State) bool {
		raw, ok := st.Plans[id]
		if !ok || raw.Revision == checked {
			return !ok
		}
		checked = raw.Revision
		rec, found, err := coordinator.PlansIn(st).Load(ctx, id)
		return err != nil || !found || rec.Seq > seq || rec.State.Terminal()
	})
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	return b.Plan(ctx, id)
}

func (b backend) RequestPlan(ctx context.Context, id string, req exec.Request) (*api.PlanResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	cur, err := b.Plan(ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.State.Terminal() {
		return nil, api.Errorf(api.CodeConflict, "see it with 'cdcctl plan show "+id+"'", "plan %s is already %s", id, cur.State)
	}
	if err := coord.RequestPlan(ctx, term, id, req); err != nil {
		if errors.Is(err, meta.ErrPlanNotFound) {
			return nil, planNotFound(id)
		}
		return nil, engineError(err, id)
	}
	cur.Request = req
	return cur, nil
}

func (b backend) SubmitPlan(ctx context.Context, req api.SubmitPlanRequest) (*api.PlanResponse, error) {
	// A rollout restarts every agent, the coordinator's too, which only
	// an admin may make resign: an operator's plans move work, they do
	// not stop agents.
	if p, ok := api.PrincipalOf(ctx); ok && req.Plan != nil && req.Plan.Kind == plan.KindRollout && p.Role < api.RoleAdmin {
		return nil, api.Errorf(api.CodeForbidden, "ask for a token with the admin role (docs/security.md)",
			"user %s (role %s) may not submit a rollout: it restarts every agent, and needs the admin role", p.User, p.Role)
	}
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	budget, err := req.Budget.Budget()
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "give the budget as durations, --resume-below under --max-lag ('cdcctl plan apply --help')", "%v", err)
	}
	rec, err := coord.Submit(ctx, term, req.Plan, coordinator.Submission{By: req.SubmittedBy, Paused: req.Paused, Budget: budget})
	if err != nil {
		return nil, refusalError(err)
	}
	return api.PlanOf(rec, exec.RequestNone), nil
}

func (b backend) SetPlanBudget(ctx context.Context, id string, req api.SetBudgetRequest) (*api.PlanResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	budget, err := req.Budget.Budget()
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "give the budget as durations, --resume-below under --max-lag ('cdcctl plan set --help')", "%v", err)
	}
	rec, err := coord.SetPlanBudget(ctx, term, id, budget, req.SubmittedBy)
	switch {
	case errors.Is(err, meta.ErrPlanNotFound):
		return nil, planNotFound(id)
	case errors.Is(err, coordinator.ErrPlanOver):
		return nil, api.Errorf(api.CodeConflict, "see it with 'cdcctl plan show "+id+"'", "%v", err)
	case err != nil:
		return nil, engineError(err, id)
	}
	return api.PlanOf(rec, exec.RequestNone), nil
}
