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

// planLag is what a plan's lag budget reads (exec.LagFunc), from the
// state of this pass: the worst checkpoint lag among the changefeeds the
// plan's steps act on, of those replicating (a paused or failed
// changefeed's lag grows without telling anything of the plan's effect,
// and must not hold it). A plan whose steps name no changefeed is bound by
// every changefeed's.
func planLag(st *meta.State, now func() time.Time) exec.LagFunc {
	return func(_ context.Context, p *plan.Plan) (string, time.Duration, error) {
		ids := p.Changefeeds()
		if len(ids) == 0 {
			ids = st.ChangefeedIDs()
		}
		var worst model.ChangefeedID
		var lag time.Duration
		at := now()
		for _, id := range ids {
			e := st.Changefeeds[id]
			if e == nil || e.Status.State != model.ChangefeedNormal || e.Status.CheckpointTs == 0 {
				continue
			}
			if l := at.Sub(e.Status.CheckpointTs.Time()); l > lag || worst == "" {
				worst, lag = id, max(l, 0)
			}
		}
		return string(worst), lag, nil
	}
}

// ErrPlanOver refuses to change a plan that has ended.
var ErrPlanOver = errors.New("the plan is over")

// SetPlanBudget changes a plan's lag budget while it runs (cdcctl plan
// set): the record is written over the revision it was read at, read
// again when the executor wrote it first. The executor applies the new
// budget at its next pass.
func (c *Coordinator) SetPlanBudget(ctx context.Context, term election.Term, id string, b exec.Budget, by string) (*exec.Record, error) {
	if err := b.Check(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		st, err := c.store.Load(ctx)
		if err != nil {
			return nil, err
		}
		stored, ok, err := PlansIn(st).Load(ctx, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, meta.ErrPlanNotFound
		}
		if stored.State.Terminal() {
			return stored.Record, fmt.Errorf("%w: plan %s is %s", ErrPlanOver, id, stored.State)
		}
		stored.SetBudget(b, by, time.Now().UTC())
		if _, err := NewPlanStore(c.store, term, st).Save(ctx, stored.Record, stored.Revision); err == nil {
			c.log.Info("coordinator: plan budget changed", "plan", id, "budget", b.String(), "by", by)
			return stored.Record, nil
		} else if !errors.Is(err, meta.ErrStale) || attempt >= 5 {
			return nil, err
		}
	}
}
