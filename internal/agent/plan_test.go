package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// createFeeds creates n small changefeeds into their own directories and
// returns their sink URIs by name.
func (tc *testCluster) createFeeds(c *api.Client, n int) map[string]string {
	tc.t.Helper()
	dir := tc.t.TempDir()
	return tc.createFeedsInto(c, n, func(name string) string { return "file://" + dir + "/" + name + "?flush-interval=100ms" })
}

// createFeedsInto is createFeeds with each changefeed's sink URI given.
func (tc *testCluster) createFeedsInto(c *api.Client, n int, sinkOf func(name string) string) map[string]string {
	tc.t.Helper()
	sinks := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("cf%02d", i)
		sinks[name] = sinkOf(name)
		if _, err := c.CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: name, Source: "gen://?tables=2&keys=50&rate=200", Sink: sinks[name], PartitionsPerTable: 2}); err != nil {
			tc.t.Fatal(err)
		}
	}
	return sinks
}

// maintainersOn counts the changefeeds whose maintainer is on a node.
func (tc *testCluster) maintainersOn(node model.NodeID) int {
	n := 0
	for _, e := range tc.state().Changefeeds {
		if e.Maintainer.Node == node {
			n++
		}
	}
	return n
}

func (tc *testCluster) plan(c *api.Client, id string) *api.PlanResponse {
	tc.t.Helper()
	p, err := c.Plan(context.Background(), id)
	if err != nil {
		tc.t.Fatal(err)
	}
	return p
}

// pausedDrain drains a follower holding at least min maintainers, batch
// 1, and pauses the plan at once (so that it holds where it is).
func (tc *testCluster) pausedDrain(c *api.Client, leader model.NodeID, min int) (model.NodeID, *api.DrainCaptureResponse) {
	tc.t.Helper()
	ctx := context.Background()
	var target model.NodeID
	tc.eventually(fmt.Sprintf("a follower holds at least %d maintainers", min), 20*time.Second, func() bool {
		for id := range tc.nodes {
			if id != leader && tc.maintainersOn(id) >= min {
				target = id
				return true
			}
		}
		return false
	})
	// Submitted paused, so no maintainer move has begun when the test
	// picks one (a pause requested after the submission came too late
	// on a loaded machine).
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 1, Paused: true})
	if err != nil {
		tc.t.Fatal(err)
	}
	if rec := tc.plan(c, res.PlanID); rec.State != exec.Paused || startedSteps(rec, plan.StepMoveMaintainer) != 0 {
		tc.t.Fatalf("a drain submitted paused is %s with %d maintainer moves begun", rec.State, startedSteps(rec, plan.StepMoveMaintainer))
	}
	return target, res
}

// drainOfTwelve is the start of the drain scenarios: four captures (with
// faults, if any), 12 changefeeds under load, and a drain, paused, of a
// follower that holds at least 3 maintainers.
type drainOfTwelve struct {
	tc     *testCluster
	leader meta.Leader
	c      *api.Client
	sinks  map[string]string
	target model.NodeID
	res    *api.DrainCaptureResponse
}

func startDrainOfTwelve(t *testing.T, faults map[model.NodeID]Faults) drainOfTwelve {
	t.Helper()
	d := drainOfTwelve{tc: newTestCluster(t)}
	d.tc.faults = faults
	d.leader = d.tc.startCaptures(4)
	d.c = d.tc.client()
	d.sinks = d.tc.createFeeds(d.c, 12)
	d.target, d.res = d.tc.pausedDrain(d.c, d.leader.Node, 3)
	return d
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

func startedSteps(p *api.PlanResponse, kind plan.StepKind) int {
	n := 0
	for _, s := range p.Steps {
		if s.Started != nil && p.Step(s).Kind == kind {
			n++
		}
	}
	return n
}

// Seed 000 recovery scenario 1, with pause and resume: a drain plan is
// paused (no new step begins), resumed, and its coordinator is killed;
// the new coordinator resumes the plan from etcd and finishes it, never
// more than the batch at once; nothing is lost.
func TestDrainPlanPausesResumesAndSurvivesCoordinatorCrash(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	tc, leader, c, sinks, target, res := d.tc, d.leader, d.c, d.sinks, d.target, d.res
	ctx := context.Background()
	began := startedSteps(tc.plan(c, res.PlanID), plan.StepMoveMaintainer)
	time.Sleep(2 * time.Second)
	if now := startedSteps(tc.plan(c, res.PlanID), plan.StepMoveMaintainer); now != began {
		t.Fatalf("a paused plan began %d more maintainer moves", now-began)
	}
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestResume); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the resumed plan moves a maintainer", 10*time.Second, func() bool {
		return startedSteps(tc.plan(c, res.PlanID), plan.StepMoveMaintainer) > began
	})

	// Kill the coordinator mid-plan.
	tc.crash(leader.Node)
	c = tc.client()
	next := tc.waitLeader()
	if next.Node == leader.Node {
		t.Fatalf("the crashed coordinator still leads")
	}
	rec := tc.planEnd(c, res.PlanID, 60*time.Second)
	if rec.State != exec.Done || rec.MaxConcurrent(plan.StepMoveMaintainer) != 1 {
		t.Fatalf("plan %s: %s (%s), at most %d maintainer moves at once", rec.ID, rec.State, rec.Message, rec.MaxConcurrent(plan.StepMoveMaintainer))
	}
	tc.eventually(string(target)+" is Stopping and empty", 30*time.Second, func() bool {
		st, err := c.DrainStatus(ctx, string(target))
		return err == nil && st.Liveness == "Stopping" && st.RemainingMaintainerCount == 0 && len(st.RemainingDispatcherCount) == 0
	})
	for name := range sinks {
		tc.pause(c, name)
	}
	time.Sleep(2 * time.Second)
	dups := uint64(0)
	for name, sink := range sinks {
		rep := tc.verifyPaused(c, name, sink, verifyStorage)
		if !rep.OK || rep.Lost != 0 {
			t.Fatalf("%s: %+v", name, rep)
		}
		dups += rep.Duplicates
	}
	t.Logf("plan %s finished by %s after %s crashed: %d steps; 0 lost, %d duplicates (the crashed coordinator also ran dispatchers)", rec.ID, next.Node, leader.Node, len(rec.Steps), dups)
}

// Cancelling a drain plan skips what is left and clears the drain
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
	if counts := rec.Counts(); counts[exec.StepSkipped] == 0 || counts[exec.StepPending]+counts[exec.StepRunning] != 0 {
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
