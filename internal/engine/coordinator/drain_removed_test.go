package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A changefeed removed while a drain waits: its steps are skipped, not
// reported done, the plan says so when it ends, and the other
// changefeed leaves the target with nothing lost or written twice.
func TestADrainSkipsTheStepsOfAChangefeedRemovedMeanwhile(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3)
	c.CreateChangefeed("keep", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	c.CreateChangefeed("gone", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	c.WaitCheckpoint("keep", model.TsFromTime(time.Now()))
	c.WaitCheckpoint("gone", model.TsFromTime(time.Now()))
	// The target: a capture other than the coordinator's holding some of
	// gone's partitions.
	var target model.NodeID
	for _, r := range c.State().SortedPartitions("gone") {
		if r.Route.Node != leader.Node {
			target = r.Route.Node
		}
	}
	if target == "" {
		t.Fatal("every partition of gone is on the coordinator's capture")
	}
	snap := c.State().Snapshot()
	p, err := plan.Drain(&snap, target, 2, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Submit(p, true)
	if err != nil {
		t.Fatal(err)
	}
	c.RemoveChangefeed("gone")
	c.RequestPlan(sub.ID, exec.RequestResume)
	rec := c.PlanEnd(sub.ID, 90*time.Second)
	const why = "changefeed gone was removed"
	if rec.State != exec.Done || !strings.HasSuffix(rec.Message, "skipped ("+why+")") {
		t.Fatalf("drain %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	named := 0
	for _, s := range rec.Steps {
		step := rec.Step(s)
		switch {
		case step.Changefeed == "gone":
			named++
			if s.State != exec.StepSkipped || s.Note != why {
				t.Errorf("%s: %s (%s)", plan.StepText(step), s.State, s.Note)
			}
		case s.State != exec.StepDone:
			t.Errorf("%s: %s (%s)", plan.StepText(step), s.State, s.Note)
		}
	}
	if named == 0 {
		t.Fatalf("the drain of %s has no step of gone", target)
	}
	for _, r := range c.State().SortedPartitions("keep") {
		if r.Route.Node == target {
			t.Errorf("partition %s of keep is still on %s", r.Route.ID, target)
		}
	}
	if rep := c.PauseAndVerify("keep"); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("keep after the drain: %+v", rep)
	}
}
