package coordinator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A plan with a step this coordinator has no code for (a plan file
// edited by hand, or made by a cdcctl of another version, submitted past
// the API's own check) is refused at submission with the fix. A drain's
// was taken, and its driver, waiting for the step, left the plan Running
// for ever.
func TestAPlanWithAStepThisCoordinatorDoesNotKnowIsRefused(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(2)
	c.CreateChangefeed("cf", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	c.WaitCheckpoint("cf", model.TsFromTime(time.Now()))
	snap := c.State().Snapshot()
	drain, err := plan.Drain(&snap, c.FollowerOf(leader.Node), 2, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	rollout, err := plan.Rollout(&snap, nil, 1, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	var r model.PartitionState
	for _, p := range snap.Partitions {
		if p.Route.Node != leader.Node {
			r = p
		}
	}
	move, err := plan.Move(&snap, r.Route.ID, leader.Node, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*plan.Plan{drain, rollout, move} {
		p.Batches = append([]plan.Batch{{Steps: []plan.Step{{Kind: "teleport", Changefeed: "cf", Partition: r.Route.ID, To: leader.Node}}}}, p.Batches...)
		sub, err := c.Submit(p, false)
		var refusal *plan.Refusal
		if !errors.As(err, &refusal) || refusal.Reason != plan.RefuseInvalid || !strings.Contains(err.Error(), "a "+string(p.Kind)+" plan cannot have teleport steps") {
			if sub != nil {
				t.Fatalf("%s plan with a teleport step: taken as %s (%s)", p.Kind, sub.ID, sub.State)
			}
			t.Fatalf("%s plan with a teleport step: %v", p.Kind, err)
		}
	}
	if rep := c.PauseAndVerify("cf"); !rep.OK || rep.Lost != 0 {
		t.Fatalf("after the refused plans: %+v", rep)
	}
}
