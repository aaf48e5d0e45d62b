package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A rolling restart under load (cdcctl rollout restart): every capture
// restarts once, as a new incarnation; the coordinator's capture goes
// last and hands the role over before it is asked to restart; each
// capture is given work again; and the sinks hold every event in per-key
// order, none twice (every move was graceful).
func TestARolloutRestartsEveryCaptureOnceAndLosesNothing(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	for _, id := range c.Feeds(3) {
		c.Warm(id, time.Second)
	}
	before := map[model.NodeID]int64{}
	for id, e := range c.State().Nodes {
		before[id] = e.Info.Incarnation
	}

	rec := submitRollout(t, c)
	if got := rec.Plan.RolloutCaptures(); len(got) != 3 || got[2] != leader {
		t.Fatalf("the rollout restarts %v; want all three, the coordinator %s last", got, leader)
	}
	done := c.PlanEnd(rec.ID, 4*time.Minute)
	if done.State != exec.Done {
		t.Fatalf("rollout %s: %s (%s)", done.ID, done.State, done.Message)
	}

	st := c.State()
	for id, inc := range before {
		e, ok := st.Nodes[id]
		if !ok || e.Info.Incarnation == inc || st.LivenessOf(id) != model.LivenessAlive {
			t.Errorf("%s after the rollout: registered %v, incarnation %x (was %x), %s", id, ok, e.Info.Incarnation, inc, st.LivenessOf(id))
		}
		if n := c.Restarts(id); n != 1 {
			t.Errorf("%s restarted %d times; want once", id, n)
		}
	}
	if now, ok := st.Leader(); !ok || now.Node == leader {
		t.Errorf("the coordinator after the rollout is %v (%v); want another than %s, which handed the role over", now.Node, ok, leader)
	}
	var resigned, asked *time.Time
	for _, s := range done.Steps {
		switch step := done.Step(s); {
		case step.Kind == plan.StepResign && step.To == leader:
			resigned = s.Ended
		case step.Kind == plan.StepRestart && step.To == leader:
			asked = s.Started
		}
	}
	if resigned == nil || asked == nil || asked.Before(*resigned) {
		t.Errorf("%s was asked to restart at %v, the role handed over at %v; want the role moved first", leader, asked, resigned)
	}
	if len(st.Restarts) != 0 {
		t.Errorf("restart requests left after the rollout: %+v", st.Restarts)
	}
	for id := range before {
		if n := partitionsOn(c, id); n == 0 {
			t.Errorf("%s holds no partition after the rollout; each capture is given work again", id)
		}
	}
	c.VerifyAll(true)
}

// submitRollout computes a rollout of every capture and submits it,
// computing it again while the balance scheduler makes it stale.
func submitRollout(t *testing.T, c *enginetest.Cluster) *exec.Record {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		snap := coordinator.Snapshot(c.State())
		p, err := plan.Rollout(&snap, nil, 2, plan.DefaultCosts)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := c.Submit(p, false)
		var stale *plan.StaleError
		if err == nil {
			return rec
		}
		if !errors.As(err, &stale) || time.Now().After(deadline) {
			t.Fatalf("submit the rollout: %v", err)
		}
	}
}
