package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// startDrainRecord begins a drain plan (its first step): the drain
// record, naming the plan, and the target's liveness Draining, in one
// fenced transaction. If the plan's record is already there (a new
// coordinator repeating the step), it does nothing.
func (c *Coordinator) startDrainRecord(ctx context.Context, term election.Term, st *meta.State, p *plan.Plan) (model.DrainRecord, error) {
	if st.Drain != nil && st.Drain.PlanID == p.ID {
		return *st.Drain, nil
	}
	target := p.Target
	rec := model.DrainRecord{Target: target, BatchSize: p.BatchSize, StartTime: time.Now().UTC(), PlanID: p.ID}
	maintainers, dispatchers := DrainProgress(st, target)
	rec.InitialMaintainerCount = maintainers
	for _, n := range dispatchers {
		rec.InitialDispatcherCount += n
	}
	rec, err := c.store.StartDrain(ctx, term.Fence, rec)
	if err != nil && !errors.Is(err, meta.ErrFenced) {
		// The executor and the submitting request both take this step;
		// whichever came second finds the plan's own record.
		if now, lerr := c.store.Load(ctx); lerr == nil && now.Drain != nil && now.Drain.PlanID == p.ID {
			return *now.Drain, nil
		} else if lerr == nil && now.Drain == nil && drainStepTaken(now, p.ID) {
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

// drainStepTaken says a drain plan's first step (the drain record) has
// run: the plan is done or its first step started.
func drainStepTaken(st *meta.State, planID string) bool {
	raw, ok := st.Plans[planID]
	if !ok {
		return false
	}
	var r exec.Record
	if json.Unmarshal(raw.Value, &r) != nil {
		return false
	}
	return r.State == exec.Done || len(r.Steps) > 0 && r.Steps[0].Started != nil
}

// DrainProgress counts what is left on the drain's target.
func DrainProgress(st *meta.State, target model.NodeID) (maintainers int, dispatchers map[model.ChangefeedID]int) {
	dispatchers = map[model.ChangefeedID]int{}
	for _, id := range st.ChangefeedIDs() {
		if st.Changefeeds[id].Maintainer.Node == target {
			maintainers++
		}
		for _, r := range st.Partitions[id] {
			if r.Route.Node == target {
				dispatchers[id]++
			}
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
