package agent

import (
	"context"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// runDemoGen runs the demo changefeed into sink (warm for a second) and
// returns its generator, to pick keys from.
func (tc *testCluster) runDemoGen(c *api.Client, sink string) *gen.Generator {
	tc.t.Helper()
	created, _ := tc.runDemo(c, demoSource, sink, time.Second)
	return tc.generator(created.Source)
}

// generator is the generator behind a changefeed's source URI: what the
// changefeed reads, to pick keys from or to verify against.
func (tc *testCluster) generator(source string) *gen.Generator {
	tc.t.Helper()
	cfg, err := gen.ParseURI(source)
	if err != nil {
		tc.t.Fatal(err)
	}
	g, err := gen.New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	return g
}

// applyPlan submits a plan computed from the current snapshot and waits
// for its end.
func (tc *testCluster) applyPlan(c *api.Client, compute func(*model.Snapshot) (*plan.Plan, error)) *api.PlanResponse {
	tc.t.Helper()
	ctx := context.Background()
	// A partition the balance scheduler is moving is busy: wait and
	// compute again, as seed 003's clients do with ErrPartitionBusy. A
	// plan that went stale (the scheduler moved something it read) is
	// computed again too, as the refusal tells an operator to.
	var sub *api.PlanResponse
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			tc.t.Fatal(err)
		}
		p, err := compute(&snap.Snapshot)
		if err == nil {
			sub, err = c.SubmitPlan(ctx, api.SubmitPlanRequest{Plan: p, SubmittedBy: "test"})
		}
		if err == nil {
			break
		}
		retry := api.IsCode(apiErr(err), api.CodePartitionBusy) || api.IsCode(apiErr(err), api.CodeStalePlan)
		if !retry || time.Now().After(deadline) {
			tc.t.Fatalf("plan: %v", err)
		}
		tc.t.Logf("plan refused, computing it again: %v", err)
	}
	rec := tc.planEnd(c, sub.ID, 30*time.Second)
	if rec.State != exec.Done {
		tc.t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	return rec
}

// apiErr is a planner's refusal as the API would answer it.
func apiErr(err error) error {
	if e, ok := api.PlanError(err); ok {
		return e
	}
	return err
}
