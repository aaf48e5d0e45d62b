package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A drain under a lag budget its changefeeds cannot meet (they lag more
// than a millisecond whatever happens) is held before its first move,
// saying which changefeed lags how much, and begins nothing while held;
// its budget changed on the running plan (cdcctl plan set), it goes on
// by itself, ends done, and the sinks hold every event in order, none
// twice. A second drain held past its hold timeout fails saying so, with
// nothing begun.
func TestALagBudgetHoldsADrainUntilItIsMet(t *testing.T) {
	t.Parallel()
	c, feeds, target := loadedFollower(t, 3, 4)
	rec, err := c.DrainWith(target, 2, coordinator.Submission{By: "test", Budget: exec.Budget{MaxLag: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually("the drain is held by its budget", 20*time.Second, func() bool { return c.Plan(rec.ID).Held != nil })
	on := partitionsOn(c, target)
	time.Sleep(2 * time.Second)
	if now := partitionsOn(c, target); now != on || on == 0 {
		t.Fatalf("while the drain is held, the partitions on %s went from %d to %d", target, on, now)
	}
	if st := c.State(); st.Drain == nil || st.Drain.Hold == "" || st.LivenessOf(target) != model.LivenessDraining {
		t.Fatalf("while held: drain record %+v, %s", st.Drain, st.LivenessOf(target))
	}
	held := c.Plan(rec.ID)
	if n := enginetest.StartedSteps(held, plan.StepMoveMaintainer) + enginetest.StartedSteps(held, plan.StepMovePartitions); n != 0 || held.State != exec.Running {
		t.Fatalf("a held drain is %s with %d moves begun", held.State, n)
	}
	var said string
	for _, ev := range held.Log {
		if ev.Type == exec.EventHeld {
			said = ev.Message
		}
	}
	if !strings.Contains(said, "over --max-lag 1ms") || !strings.Contains(said, "changefeed cf0") {
		t.Fatalf("the hold's event: %q", said)
	}

	c.SetPlanBudget(rec.ID, exec.Budget{MaxLag: time.Hour})
	done := c.PlanEnd(rec.ID, 90*time.Second)
	if done.State != exec.Done || done.Held != nil {
		t.Fatalf("after its budget was raised: %s (%s), held %+v", done.State, done.Message, done.Held)
	}
	types := map[exec.EventType]bool{}
	for _, ev := range done.Log {
		types[ev.Type] = true
	}
	if !types[exec.EventBudget] || !types[exec.EventUnheld] {
		t.Fatalf("events: %v", types)
	}
	c.Eventually(string(target)+" is Stopping and empty", 30*time.Second, func() bool {
		st := c.State()
		maintainers, dispatchers := coordinator.DrainProgress(st, target)
		return st.LivenessOf(target) == model.LivenessStopping && maintainers == 0 && len(dispatchers) == 0
	})
	for _, id := range feeds {
		if rep := c.PauseAndVerify(id); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
			t.Fatalf("%s after a drain held by its budget: %+v", id, rep)
		}
	}
}

// A plan held longer than its hold timeout fails, saying so, with its
// moves not begun.
func TestAPlanHeldPastItsHoldTimeoutFails(t *testing.T) {
	t.Parallel()
	c, feeds, target := loadedFollower(t, 2, 2)
	rec, err := c.DrainWith(target, 1, coordinator.Submission{By: "test", Budget: exec.Budget{MaxLag: time.Millisecond, HoldTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	failed := c.PlanEnd(rec.ID, 30*time.Second)
	if failed.State != exec.Failed || !strings.HasPrefix(failed.Message, exec.HoldTimeoutPrefix+"2s") {
		t.Fatalf("held past its hold timeout: %s (%s)", failed.State, failed.Message)
	}
	if n := enginetest.StartedSteps(failed, plan.StepMoveMaintainer); n != 0 {
		t.Fatalf("%d maintainer moves begun", n)
	}
	on := partitionsOn(c, target)
	time.Sleep(2 * time.Second)
	if now := partitionsOn(c, target); now != on || on == 0 {
		t.Fatalf("after the drain failed held, the partitions on %s went from %d to %d", target, on, now)
	}
	// Submitted again without a budget, the drain runs to its end.
	again, err := c.DrainWith(target, 1, coordinator.Submission{By: "test"})
	if err != nil {
		t.Fatalf("the drain submitted again after its hold timeout: %v", err)
	}
	if rec := c.PlanEnd(again.ID, 60*time.Second); rec.State != exec.Done {
		t.Fatalf("the drain submitted again: %s (%s)", rec.State, rec.Message)
	}
	for _, id := range feeds {
		if rep := c.PauseAndVerify(id); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
			t.Fatalf("%s: %+v", id, rep)
		}
	}
}

// partitionsOn counts the partitions of every changefeed on a capture.
func partitionsOn(c *enginetest.Cluster, node model.NodeID) int {
	return c.State().PartitionsOn(node)
}

// loadedFollower starts a cluster of captures running feeds generator
// changefeeds, and names a follower that holds a maintainer.
func loadedFollower(t *testing.T, captures, feeds int) (*enginetest.Cluster, []model.ChangefeedID, model.NodeID) {
	t.Helper()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(captures).Node
	ids := c.Feeds(feeds)
	for _, id := range ids {
		c.Warm(id, time.Second)
	}
	target := c.FollowerOf(leader)
	c.Eventually(string(target)+" holds a maintainer", 20*time.Second, func() bool { return c.MaintainersOn(target) > 0 })
	return c, ids, target
}
