package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Seed 000 recovery scenarios 2, 3 and 6: a destination of the drain dies
// while the drain runs. Maintainers already moved onto it (or starting
// there, which is where a bootstrap would fail) are rescheduled by the
// basic scheduler; steps still planned onto it are re-planned onto the
// least-loaded capture left, with a replanned event that says so. The
// drain finishes and nothing is lost.
func TestDrainDestinationDiesMidDrain(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	tc, leader, c, sinks, target, res := d.tc, d.leader, d.c, d.sinks, d.target, d.res
	ctx := context.Background()

	// The victim: a destination (not the coordinator) of a step not begun.
	victim := tc.pendingDestination(c, res.PlanID, leader.Node)
	tc.crash(victim)
	diedAt := time.Now()
	tc.eventually(string(victim)+" is gone from etcd", 20*time.Second, func() bool {
		_, ok := tc.state().Nodes[victim]
		return !ok
	})
	c = tc.client()
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestResume); err != nil {
		t.Fatal(err)
	}
	rec := tc.planEnd(c, res.PlanID, 60*time.Second)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	replanned := ""
	for _, ev := range rec.Log {
		if ev.Type == exec.EventReplanned && strings.Contains(ev.Message, string(victim)) {
			replanned = ev.Message
		}
	}
	if replanned == "" {
		t.Fatalf("no replanned event names %s: %+v", victim, rec.Log)
	}
	for _, s := range rec.Steps {
		if step := rec.Step(s); step.To == victim && (s.Started == nil || s.Started.After(diedAt)) {
			t.Fatalf("a move to the dead %s began after it died: %+v", victim, s)
		}
	}
	st := tc.state()
	for _, id := range st.ChangefeedIDs() {
		if n := st.Changefeeds[id].Maintainer.Node; n == target || n == victim {
			t.Fatalf("%s: maintainer still on %s", id, n)
		}
		for _, r := range st.Partitions[id] {
			if r.Route.Node == target || r.Route.Node == victim {
				t.Fatalf("%s/%s still on %s", id, r.Route.ID, r.Route.Node)
			}
		}
	}
	t.Logf("replanned: %s", replanned)
	tc.verifyAll(c, sinks, false)
}

// pendingDestination is the destination of a maintainer move of a drain
// plan that has not begun, other than the coordinator.
func (tc *testCluster) pendingDestination(c *api.Client, planID string, coordinator model.NodeID) model.NodeID {
	tc.t.Helper()
	rec := tc.plan(c, planID)
	for _, s := range rec.Steps {
		step := rec.Step(s)
		if step.Kind == plan.StepMoveMaintainer && s.State == exec.StepPending && step.To != coordinator {
			return step.To
		}
	}
	tc.t.Fatalf("no pending maintainer move to a capture other than the coordinator %s in %+v", coordinator, rec.Steps)
	return ""
}

// verifyAll pauses every changefeed and proves each sink holds every
// event in per-key order; exactlyOnce also demands no duplicates (a
// crashed capture may legitimately have written some twice).
func (tc *testCluster) verifyAll(c *api.Client, sinks map[string]string, exactlyOnce bool) {
	tc.t.Helper()
	for name := range sinks {
		tc.pause(c, name)
	}
	// Paused dispatchers stop gracefully and leave an exact checkpoint.
	time.Sleep(2 * time.Second)
	for name, sink := range sinks {
		check := verifyStorage
		if strings.HasPrefix(sink, "kafka://") {
			check = verifyKafka
		}
		rep := tc.verifyPaused(c, name, sink, check)
		if !rep.OK || rep.Lost != 0 || (exactlyOnce && rep.Duplicates != 0) {
			tc.t.Fatalf("%s: %+v", name, rep)
		}
	}
}

// Seed 000 recovery scenario 8: every capture but the one being drained
// dies. The draining capture is the only one left: it goes back to
// Alive, becomes the coordinator, the drain record is cleared, the plan
// ends saying why, and the changefeeds run on it without loss.
func TestOnlyTheDrainingCaptureLeft(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sinks := tc.createFeeds(c, 6)
	// Two maintainers at least: the paused plan keeps one there, so the
	// drain cannot complete (and the capture go Stopping) before the
	// crashes.
	target, res := tc.pausedDrain(c, leader.Node, 2)
	for id := range tc.nodes {
		if id != target && id != leader.Node {
			tc.crash(id)
		}
	}
	tc.crash(leader.Node)
	c = tc.client()
	tc.eventually(string(target)+" leads, Alive", 20*time.Second, func() bool {
		l, ok := tc.leader()
		return ok && l.Node == target && tc.state().LivenessOf(target) == model.LivenessAlive
	})
	if d := tc.state().Drain; d != nil {
		t.Fatalf("drain record still in etcd: %+v", d)
	}
	rec := tc.planEnd(c, res.PlanID, 20*time.Second)
	if rec.State != exec.Failed || !strings.Contains(rec.Message, "only capture left") {
		t.Fatalf("plan %s: %s (%s), want failed naming the only-capture-left exception", rec.ID, rec.State, rec.Message)
	}
	tc.eventually("every partition runs on "+string(target), 30*time.Second, func() bool {
		st := tc.state()
		for _, id := range st.ChangefeedIDs() {
			if st.Changefeeds[id].Maintainer.Node != target {
				return false
			}
			for _, r := range st.Partitions[id] {
				if r.Route.Node != target {
					return false
				}
			}
		}
		return true
	})
	for name := range sinks {
		got, err := c.Changefeed(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tc.waitCheckpoint(c, name, model.Ts(got.CheckpointTs))
	}
	tc.verifyAll(c, sinks, false)
}

// Seed 000 recovery scenario 6: a drain moves maintainers onto a capture
// where they cannot start (they cannot open their changefeed's source
// there). Each says so in its changefeed's status; the coordinator places
// it on another capture and keeps it off that one; the drain finishes,
// `changefeed get` names the capture and the error, and nothing is lost
// or written twice.
func TestAMaintainerThatCannotStartIsPlacedElsewhere(t *testing.T) {
	t.Parallel()
	var bad atomic.Value // model.NodeID: where maintainers cannot start
	faults := map[model.NodeID]Faults{}
	for i := 1; i <= 4; i++ {
		id := model.NodeID(fmt.Sprintf("capture-%d", i))
		faults[id] = Faults{FailBootstrap: func(model.ChangefeedID) error {
			if b, _ := bad.Load().(model.NodeID); b == id {
				return errors.New("injected: the source is unreachable from " + string(id))
			}
			return nil
		}}
	}
	d := startDrainOfTwelve(t, faults)
	tc, leader, c, sinks, target, res := d.tc, d.leader, d.c, d.sinks, d.target, d.res
	ctx := context.Background()

	// The bad capture: a destination (not the coordinator) of a step
	// not begun.
	victim := tc.pendingDestination(c, res.PlanID, leader.Node)
	bad.Store(victim)
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestResume); err != nil {
		t.Fatal(err)
	}
	rec := tc.planEnd(c, res.PlanID, 3*time.Minute)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	tc.eventually("no maintainer on "+string(victim)+" or "+string(target), time.Minute, func() bool {
		return tc.maintainersOn(victim) == 0 && tc.maintainersOn(target) == 0
	})
	named := 0
	for name := range sinks {
		got, err := c.Changefeed(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Maintainer == string(victim) {
			t.Fatalf("%s: maintainer back on %s", name, victim)
		}
		for _, in := range got.Incidents {
			if in.Kind == model.IncidentMaintainerFailed && in.Node == victim && strings.Contains(in.Err, "injected") {
				named++
			}
		}
	}
	if named == 0 {
		t.Fatalf("no changefeed's status says its maintainer could not start on %s", victim)
	}
	t.Logf("%d maintainers could not start on %s and were placed elsewhere", named, victim)
	tc.verifyAll(c, sinks, true)
}

// Seed 000 recovery scenario 2, with the move in flight: the drain has
// just placed a maintainer on its destination (the step runs) when that
// destination dies. The basic scheduler places the maintainer again on a
// live capture, the step ends, the drain finishes, and nothing is lost.
func TestDrainDestinationDiesWithAMoveInFlight(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	tc, leader, c, sinks, target, res := d.tc, d.leader, d.c, d.sinks, d.target, d.res
	ctx := context.Background()
	if _, err := c.RequestPlan(ctx, res.PlanID, exec.RequestResume); err != nil {
		t.Fatal(err)
	}
	// Wait for a maintainer step to a capture other than the coordinator
	// to run: its maintainer is on the destination, the step not done.
	var victim model.NodeID
	var cf string
	tc.eventually("a maintainer move in flight to a capture other than the coordinator", time.Minute, func() bool {
		rec, err := c.Plan(ctx, res.PlanID)
		if err != nil {
			return false
		}
		for _, s := range rec.Steps {
			step := rec.Step(s)
			if step.Kind == plan.StepMoveMaintainer && s.State == exec.StepRunning && step.To != leader.Node && step.To != target {
				if e := tc.state().Changefeeds[model.ChangefeedID(step.Changefeed)]; e != nil && e.Maintainer.Node == step.To {
					victim, cf = step.To, step.Changefeed
					return true
				}
			}
		}
		return false
	})
	tc.crash(victim)
	t.Logf("crashed %s while %s's maintainer was moving onto it", victim, cf)
	c = tc.client()
	rec := tc.planEnd(c, res.PlanID, 2*time.Minute)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	tc.eventually("no maintainer or partition on "+string(victim)+" or "+string(target), time.Minute, func() bool {
		st := tc.state()
		for _, id := range st.ChangefeedIDs() {
			if n := st.Changefeeds[id].Maintainer.Node; n == target || n == victim {
				return false
			}
			for _, r := range st.Partitions[id] {
				if r.Route.Node == target || r.Route.Node == victim {
					return false
				}
			}
		}
		return true
	})
	// A crash may have written some rows twice (at-least-once); none may
	// be missing.
	tc.verifyAll(c, sinks, false)
}
