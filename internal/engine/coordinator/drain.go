package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// maintainerMoveSettle is how long a moved maintainer counts as in flight
// for the drain's batch limit: the new maintainer reads the routing table
// and starts moving its partitions within it.
const maintainerMoveSettle = time.Second

// drainState is the coordinator's memory of the drain it drives; the
// truth is the DrainRecord in etcd, so a new coordinator starts afresh.
type drainState struct {
	mu    sync.Mutex
	moved map[model.ChangefeedID]time.Time
}

// StartDrain validates a drain with the planner's rules (seed 000's error
// table) and persists it: DrainRecord and liveness Draining in one fenced
// transaction. The coordinator then drives it.
//
// approved, if not nil, is the plan the operator saw: it is refused with a
// *plan.StaleError if anything it read changed since.
func (c *Coordinator) StartDrain(ctx context.Context, term election.Term, target model.NodeID, batch int, approved *plan.Plan) (model.DrainRecord, error) {
	st, err := c.store.Load(ctx)
	if err != nil {
		return model.DrainRecord{}, err
	}
	snap := st.Snapshot()
	if approved != nil {
		if approved.Kind != "drain" || approved.Target != target {
			return model.DrainRecord{}, &plan.Refusal{Reason: plan.RefuseInvalid,
				Message: fmt.Sprintf("the plan is a %s plan of %q, not a drain of %s", approved.Kind, approved.Target, target),
				Hint:    "submit it with 'cdcctl plan apply FILE'"}
		}
		if changes := plan.Check(approved, &snap); len(changes) > 0 {
			return model.DrainRecord{}, &plan.StaleError{Changes: changes}
		}
		batch = approved.BatchSize
	}
	if err := plan.ValidateDrain(&snap, target); err != nil {
		return model.DrainRecord{}, err
	}
	if batch < 1 {
		batch = 1
	}
	rec := model.DrainRecord{Target: target, BatchSize: batch, StartTime: time.Now().UTC()}
	for _, cf := range snap.Changefeeds {
		if cf.Maintainer.Node == target {
			rec.InitialMaintainerCount++
		}
	}
	for _, p := range snap.Partitions {
		if p.Route.Node == target {
			rec.InitialDispatcherCount++
		}
	}
	rec, err = c.store.StartDrain(ctx, term.Fence, rec)
	if err != nil {
		return rec, err
	}
	c.log.Info("coordinator: drain started", "target", target, "epoch", rec.Epoch, "batch", batch,
		"maintainers", rec.InitialMaintainerCount, "dispatchers", rec.InitialDispatcherCount)
	return rec, nil
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

// driveDrain is one pass of the drain: maintainers off the target in
// batches, completion when nothing is left (then Stopping and the record
// cleared), or the record cleared when the target is gone.
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
	if maintainers == 0 && remaining == 0 {
		if err := c.store.FinishDrain(ctx, term.Fence, st); err != nil {
			return err
		}
		c.log.Info("coordinator: drain complete; target is Stopping", "target", target, "took", time.Since(st.Drain.StartTime).Round(time.Millisecond))
		return nil
	}
	c.drain.mu.Lock()
	defer c.drain.mu.Unlock()
	if c.drain.moved == nil {
		c.drain.moved = map[model.ChangefeedID]time.Time{}
	}
	inFlight := 0
	for id, at := range c.drain.moved {
		if time.Since(at) < maintainerMoveSettle {
			inFlight++
		} else {
			delete(c.drain.moved, id)
		}
	}
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	for _, id := range st.ChangefeedIDs() {
		dest.Count(st.Changefeeds[id].Maintainer.Node)
	}
	for _, id := range st.ChangefeedIDs() {
		if inFlight >= st.Drain.BatchSize {
			break
		}
		e := st.Changefeeds[id]
		if e.Maintainer.Node != target {
			continue
		}
		to, ok := dest.Next()
		if !ok {
			c.log.Warn("coordinator: no schedulable capture for the drain; waiting", "target", target)
			return nil
		}
		if err := c.store.PlaceMaintainer(ctx, term.Fence, e, to); err != nil {
			if errors.Is(err, meta.ErrStale) {
				continue
			}
			return fmt.Errorf("move maintainer of %s: %w", id, err)
		}
		c.drain.moved[id] = time.Now()
		inFlight++
		c.log.Info("coordinator: drain moved a maintainer", "changefeed", id, "from", target, "to", to)
	}
	return nil
}
