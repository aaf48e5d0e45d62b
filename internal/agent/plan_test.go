package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// createFeeds creates n small changefeeds into their own directories and
// returns their sink URIs by name.
func (tc *testCluster) createFeeds(c *api.Client, n int) map[string]string {
	tc.t.Helper()
	dir := tc.t.TempDir()
	sinks := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("cf%02d", i)
		sinks[name] = "file://" + dir + "/" + name + "?flush-interval=100ms"
		if _, err := c.CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: name, Source: "gen://?tables=2&keys=50&rate=200", Sink: sinks[name], PartitionsPerTable: 2}); err != nil {
			tc.t.Fatal(err)
		}
	}
	return sinks
}

// maintainersOn counts the changefeeds whose maintainer is on a node.
func (tc *testCluster) maintainersOn(node model.NodeID) int {
	return tc.state().MaintainersOn(node)
}

func (tc *testCluster) plan(c *api.Client, id string) *api.PlanResponse {
	tc.t.Helper()
	p, err := c.Plan(context.Background(), id)
	if err != nil {
		tc.t.Fatal(err)
	}
	return p
}

// planEnd waits for a plan to end and returns its record.
func (tc *testCluster) planEnd(c *api.Client, id string, timeout time.Duration) *api.PlanResponse {
	tc.t.Helper()
	var rec *api.PlanResponse
	tc.eventually("plan "+id+" ends", timeout, func() bool {
		var err error
		rec, err = c.Plan(context.Background(), id)
		return err == nil && rec.State.Terminal()
	})
	return rec
}

// Cancelling a drain plan cancels what is left and clears the drain
// record; the capture stays Draining (no way back to Alive but a restart).
func TestCancelledDrainPlan(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	tc.createFeeds(c, 9)
	target := tc.followerOf(leader.Node)
	tc.eventually("the target holds maintainers", 20*time.Second, func() bool { return tc.maintainersOn(target) >= 2 })
	// Submitted paused: a pause requested after the submission came too
	// late on a loaded machine (CI once saw the coordinator take it 13 s
	// after the request, when every maintainer had moved and the drain
	// had ended).
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 1, Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	tc.eventually("paused", 10*time.Second, func() bool { return tc.plan(c, res.PlanID).State == exec.Paused })
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestCancel); err != nil {
		t.Fatal(err)
	}
	var rec *api.PlanResponse
	tc.eventually("cancelled", 10*time.Second, func() bool { rec = tc.plan(c, res.PlanID); return rec.State == exec.Cancelled })
	if counts := rec.Record().Counts(); counts[exec.StepCancelled] == 0 || counts[exec.StepPending]+counts[exec.StepRunning] != 0 {
		t.Fatalf("steps after cancel: %v", counts)
	}
	tc.eventually("the drain record is gone", 10*time.Second, func() bool { return tc.state().Drain == nil })
	tc.eventually("the cancel request is deleted from etcd", 10*time.Second, func() bool {
		resp, err := tc.cli.Get(ctx, tc.store.Keys().PlanRequest(res.PlanID))
		return err == nil && resp.Count == 0
	})
	if l := tc.state().LivenessOf(target); l != model.LivenessDraining {
		t.Fatalf("%s is %s after the cancel, want Draining", target, l)
	}
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestResume); !api.IsCode(err, api.CodeConflict) {
		t.Fatalf("resuming a cancelled plan: %v, want conflict", err)
	}
}

// Finished plans do not pile up in etcd: when a plan ends, finished ones
// beyond the newest 20 that are more than a week old are deleted.
func TestFinishedPlansAreRetainedThenPruned(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour).UTC()
	write := func(id string, at time.Time) {
		rec := exec.New(id, &plan.Plan{Version: 1, Kind: "drain", Target: "capture-9"}, "test", at)
		rec.State = exec.Done
		if _, err := tc.store.SavePlan(ctx, leader.Fence, id, rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		write(fmt.Sprintf("old-%02d", i), old.Add(time.Duration(i)*time.Minute))
	}
	tc.createFeeds(c, 3)
	target := tc.followerOf(leader.Node)
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestCancel); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the history is pruned to 20 finished plans", 20*time.Second, func() bool {
		l, err := c.Plans(ctx)
		if err != nil {
			return false
		}
		finished := 0
		for _, p := range l.Plans {
			if p.State.Terminal() {
				finished++
			}
		}
		return finished == 20
	})
	kept := map[string]bool{}
	l, _ := c.Plans(ctx)
	for _, p := range l.Plans {
		kept[p.ID] = true
	}
	for _, id := range []string{res.PlanID, "old-29", "old-11"} {
		if !kept[id] {
			t.Errorf("%s was pruned", id)
		}
	}
	if kept["old-10"] || kept["old-00"] {
		t.Errorf("the oldest finished plans were kept: %v", kept)
	}
}
