package enginetest

// The plans below (drains, moves, plans applied from a snapshot) are
// submitted, steered and waited for as ops.go's operations are: on the
// elected coordinator, the way the agent's API backend calls it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Drain submits a drain of target, as 'cdcctl drain' does.
func (c *Cluster) Drain(target model.NodeID, batch int, paused bool) (*exec.Record, error) {
	c.T.Helper()
	return c.DrainWith(target, batch, coordinator.Submission{By: "test", Paused: paused})
}

// DrainWith drains a capture as submitted (paused, under a lag budget).
func (c *Cluster) DrainWith(target model.NodeID, batch int, sub coordinator.Submission) (*exec.Record, error) {
	c.T.Helper()
	var rec *exec.Record
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		var err error
		rec, _, err = coord.SubmitDrain(ctx, term, target, batch, nil, sub)
		return err
	})
	return rec, err
}

// SetPlanBudget changes a running plan's lag budget, as 'cdcctl plan
// set' does.
func (c *Cluster) SetPlanBudget(id string, b exec.Budget) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		_, err := coord.SetPlanBudget(ctx, term, id, b, "test")
		return err
	})
	if err != nil {
		c.T.Fatalf("set the budget of plan %s: %v", id, err)
	}
}

// Submit submits an approved plan, as 'cdcctl plan apply' does.
func (c *Cluster) Submit(p *plan.Plan, paused bool) (*exec.Record, error) {
	c.T.Helper()
	var rec *exec.Record
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		var err error
		rec, err = coord.Submit(ctx, term, p, coordinator.Submission{By: "test", Paused: paused})
		return err
	})
	return rec, err
}

// RequestPlan asks a running plan to pause, resume or cancel.
func (c *Cluster) RequestPlan(id string, req exec.Request) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		return coord.RequestPlan(ctx, term, id, req)
	})
	if err != nil {
		c.T.Fatalf("%s plan %s: %v", req, id, err)
	}
}

// Plan is a plan's record as etcd holds it now.
func (c *Cluster) Plan(id string) *exec.Record {
	c.T.Helper()
	s, ok, err := coordinator.PlansIn(c.State()).Load(context.Background(), id)
	if err != nil {
		c.T.Fatal(err)
	}
	rec := s.Record
	if !ok {
		c.T.Fatalf("plan %s not found, or it does not decode", id)
	}
	return rec
}

// PlanEnd waits for a plan to end and returns its record.
func (c *Cluster) PlanEnd(id string, timeout time.Duration) *exec.Record {
	c.T.Helper()
	var rec *exec.Record
	c.Eventually("plan "+id+" ends", timeout, func() bool {
		rec = c.Plan(id)
		return rec.State.Terminal()
	})
	return rec
}

// StartedSteps counts the steps of a kind that have begun.
func StartedSteps(rec *exec.Record, kind plan.StepKind) int {
	n := 0
	for _, s := range rec.Steps {
		if s.Started != nil && rec.Step(s).Kind == kind {
			n++
		}
	}
	return n
}

// ApplyPlan submits a plan computed from the current snapshot and waits
// for it to finish. A partition the balance scheduler is moving is busy:
// it waits and computes again, as seed 003's clients do; a plan that
// went stale (the scheduler moved something it read), or refused as in
// progress (a partition not placed yet), is computed again too, as the
// refusal tells an operator to; so is a move that failed because the
// scheduler began moving its partition elsewhere just before it began.
func (c *Cluster) ApplyPlan(compute func(*model.Snapshot) (*plan.Plan, error)) *exec.Record {
	c.T.Helper()
	began := time.Now()
	for {
		rec := c.applyOnce(compute)
		raced := strings.Contains(rec.Message, "meanwhile") || strings.Contains(rec.Message, "changed since the plan was checked")
		if rec.State == exec.Failed && raced && time.Since(began) < 30*time.Second {
			c.T.Logf("plan %s failed, computing it again: %s", rec.ID, rec.Message)
			continue
		}
		if rec.State != exec.Done {
			c.T.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
		}
		c.T.Logf("plan %s (%s) done in %s", rec.ID, rec.Plan.Kind, time.Since(began).Round(100*time.Millisecond))
		return rec
	}
}

// applyOnce submits a plan (computing it again while it is refused as
// stale, busy or in progress) and waits for its end.
func (c *Cluster) applyOnce(compute func(*model.Snapshot) (*plan.Plan, error)) *exec.Record {
	c.T.Helper()
	var sub *exec.Record
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		snap := coordinator.Snapshot(c.State())
		p, err := compute(&snap)
		if err == nil {
			sub, err = c.Submit(p, false)
		}
		if err == nil {
			break
		}
		var stale *plan.StaleError
		var busy *plan.BusyError
		var refused *plan.Refusal
		inProgress := errors.As(err, &refused) && refused.Reason == plan.RefuseInProgress
		if !errors.As(err, &stale) && !errors.As(err, &busy) && !inProgress || time.Now().After(deadline) {
			c.T.Fatalf("plan: %v", err)
		}
		c.T.Logf("plan refused, computing it again: %v", err)
	}
	return c.PlanEnd(sub.ID, 30*time.Second)
}

// MoveElsewhere moves a partition off the capture it is on when the plan
// is computed, to another: the scheduler may have moved it since the
// test looked (a node the test read then would be where it already is).
func (c *Cluster) MoveElsewhere(pid string) *exec.Record {
	c.T.Helper()
	return c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) {
		for _, p := range s.Partitions {
			if p.Route.ID == pid {
				return plan.Move(s, pid, c.FollowerOf(p.Route.Node), plan.DefaultCosts)
			}
		}
		return nil, fmt.Errorf("no partition %s", pid)
	})
}

// DrainReader drains, two partitions at a time, the capture that runs a
// changefeed's reader (its maintainer), kept from being the coordinator:
// the reader starts again elsewhere from the changefeed's checkpoint.
func (c *Cluster) DrainReader(cf model.ChangefeedID) *exec.Record {
	c.T.Helper()
	reader := c.MaintainerOf(cf)
	c.NotCoordinator(reader)
	return c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Drain(s, reader, 2, plan.DefaultCosts) })
}
