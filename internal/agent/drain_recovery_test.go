package agent

import (
	"context"
	"strings"
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
	tc := newTestCluster(t)
	leader := tc.startCaptures(4)
	c := tc.client()
	ctx := context.Background()
	sinks := tc.createFeeds(c, 12)
	target, res := tc.pausedDrain(c, leader.Node, 3)

	// The victim: a destination (not the coordinator) of a step not begun.
	rec := tc.plan(c, res.PlanID)
	var victim model.NodeID
	for _, s := range rec.Steps {
		step := rec.Step(s)
		if step.Kind == plan.StepMoveMaintainer && s.State == exec.StepPending && step.To != leader.Node {
			victim = step.To
			break
		}
	}
	if victim == "" {
		t.Fatalf("no pending maintainer move to a capture other than the coordinator %s in %+v", leader.Node, rec.Steps)
	}
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
	rec = tc.planEnd(c, res.PlanID, 60*time.Second)
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

// verifyAll pauses every changefeed and proves each sink holds every
// event in per-key order; exactlyOnce also demands no duplicates (a
// crashed capture may legitimately have written some twice).
func (tc *testCluster) verifyAll(c *api.Client, sinks map[string]string, exactlyOnce bool) {
	tc.t.Helper()
	ctx := context.Background()
	for name := range sinks {
		if _, err := c.PauseChangefeed(ctx, name); err != nil {
			tc.t.Fatal(err)
		}
	}
	// Paused dispatchers stop gracefully and leave an exact checkpoint.
	time.Sleep(2 * time.Second)
	for name, sink := range sinks {
		rep := tc.verifyPaused(c, name, sink, verifyStorage)
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
