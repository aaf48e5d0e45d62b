package exec

// Plans that fail while steps of them still run (failing.go).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// A step that can never take effect fails its plan, saying why; a done
// step keeps the note its check gave.
func TestAFailedStepFailsThePlan(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, StallAfter: 10 * time.Second, WaitForRunning: true}
	r := New("plan-1", drainPlan(), "ops", c.t)
	run(t, x, r, RequestNone)
	w.finish()
	run(t, x, r, RequestNone)
	if got := r.Steps[0]; got.State != StepDone || got.Note != "took effect" {
		t.Fatalf("first step: %+v", got)
	}
	w.lost[plan.StepText(r.Step(r.Steps[1]))] = true
	evs := run(t, x, r, RequestNone)
	// The other move of its batch runs on in the engine: the plan fails
	// once it has ended, its record saying how.
	if r.State != Running || r.Failing == nil || r.Steps[1].State != StepFailed || r.Steps[2].State != StepRunning {
		t.Fatalf("plan %s, failing %+v, steps %+v", r.State, r.Failing, r.Steps[1:3])
	}
	if last := evs[len(evs)-1]; last.Type != EventFailing || !strings.Contains(last.Message, "its partition is gone: no step begins; the plan fails once its 1 running step has ended") {
		t.Fatalf("last event %+v", last)
	}
	w.finish()
	evs = run(t, x, r, RequestNone)
	if r.State != Failed || !strings.Contains(r.Message, "its partition is gone") || r.Steps[2].State != StepDone || r.Steps[3].State != StepPending || r.Failing != nil {
		t.Fatalf("plan %s (%s), failing %+v, steps %+v", r.State, r.Message, r.Failing, r.Steps[1:])
	}
	if last := evs[len(evs)-1]; last.Type != EventFailed {
		t.Fatalf("last event %+v", last)
	}
	if len(w.begun) != 3 {
		t.Fatalf("a step began while the plan was failing: %v", w.begun)
	}
}

// Where the coordinator may not wait (a node of a version without the
// wait in the cluster), a failed step fails its plan at once, as before.
func TestAFailedStepFailsThePlanAtOnceWhereItMayNotWait(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, StallAfter: 10 * time.Second}
	r := New("plan-1", drainPlan(), "ops", c.t)
	run(t, x, r, RequestNone)
	w.finish()
	run(t, x, r, RequestNone)
	w.lost[plan.StepText(r.Step(r.Steps[1]))] = true
	evs := run(t, x, r, RequestNone)
	if r.State != Failed || r.Failing != nil || !strings.Contains(r.Message, "its partition is gone") || evs[len(evs)-1].Type != EventFailed {
		t.Fatalf("plan %s (%s), failing %+v, last event %+v", r.State, r.Message, r.Failing, evs[len(evs)-1])
	}
}

// A failing plan ends at once where it may no longer wait (a node of a
// version without the wait joined); and a record an older coordinator
// saved, its failed step without what the plan fails with, fails too,
// rather than running for ever on that step's batch.
func TestAFailingPlanEndsWhereItMayNoLongerWait(t *testing.T) {
	for _, older := range []bool{false, true} {
		t.Run(fmt.Sprintf("saved-by-older=%v", older), func(t *testing.T) {
			w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
			x := &Executor{Act: w, Now: c.now, StallAfter: 10 * time.Second, WaitForRunning: true}
			r := New("plan-1", drainPlan(), "ops", c.t)
			run(t, x, r, RequestNone)
			w.finish()
			run(t, x, r, RequestNone)
			w.lost[plan.StepText(r.Step(r.Steps[1]))] = true
			run(t, x, r, RequestNone)
			if r.Failing == nil {
				t.Fatalf("not failing: %s", r.State)
			}
			if older {
				r.Failing = nil // dropped by the older coordinator's save
			} else {
				x.WaitForRunning = false
			}
			c.t = c.t.Add(time.Second)
			run(t, x, r, RequestNone)
			if older {
				// Failing again, from its failed step: it waits for the
				// other, running, and ends with it.
				if r.State != Running || r.Failing == nil || !strings.Contains(r.Failing.Message, "its partition is gone") {
					t.Fatalf("a record saved without its failure: %s, failing %+v", r.State, r.Failing)
				}
				w.finish()
				run(t, x, r, RequestNone)
			}
			if r.State != Failed || !strings.Contains(r.Message, "its partition is gone") {
				t.Fatalf("%s %q, failing %+v", r.State, r.Message, r.Failing)
			}
		})
	}
}

// A plan failing keeps its first failure: a second step failing meanwhile
// neither replaces what it fails with nor starts its wait again, and a
// step not begun is not checked (it never begins); it fails once no step
// runs, or failingWait after the first failure.
func TestAFailingPlanKeepsItsFirstFailure(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		t.Run(fmt.Sprintf("stuck=%v", stuck), func(t *testing.T) {
			w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
			x := &Executor{Act: w, Now: c.now, StallAfter: 10 * time.Second, WaitForRunning: true}
			r := New("plan-1", wideDrain(), "ops", c.t)
			r.Width = 2 // 3 once the first batch ended calm: the fourth move waits for a place
			run(t, x, r, RequestNone)
			w.finish()
			run(t, x, r, RequestNone) // moves a, b and c begin; d waits
			step := func(i int) string { return plan.StepText(r.Step(r.Steps[i])) }
			w.lost[step(1)] = true
			c.t = c.t.Add(time.Second)
			run(t, x, r, RequestNone)
			if r.Failing == nil || !strings.Contains(r.Failing.Message, "maintainer a capture-3 → capture-1: its partition is gone") {
				t.Fatalf("failing %+v", r.Failing)
			}
			first := *r.Failing
			w.lost[step(2)], w.lost[step(4)] = true, true
			c.t = c.t.Add(90 * time.Second)
			evs := run(t, x, r, RequestNone)
			for _, ev := range evs {
				if ev.Type == EventFailing {
					t.Fatalf("a second failing event: %+v", ev)
				}
			}
			if r.State != Running || *r.Failing != first || r.Steps[2].State != StepFailed || r.Steps[4].State != StepPending {
				t.Fatalf("after a second failure: %s, failing %+v (was %+v), steps %+v", r.State, r.Failing, first, r.Steps[1:5])
			}
			if stuck {
				c.t = c.t.Add(31 * time.Second) // two minutes after the first failure
			} else {
				w.finish()
				c.t = c.t.Add(time.Second)
			}
			run(t, x, r, RequestNone)
			if r.State != Failed || !strings.HasPrefix(r.Message, first.Message) {
				t.Fatalf("at the end: %s %q, want the first failure %q; steps %+v", r.State, r.Message, first.Message, r.Steps)
			}
			if stuck && !strings.Contains(r.Message, "1 step was still running after 2m0s: what it began finishes in the engine, and the record shows it running") {
				t.Fatalf("the stuck step not told: %q", r.Message)
			}
			if !stuck && r.Steps[3].State != StepDone {
				t.Fatalf("the step that ended: %+v", r.Steps[3])
			}
		})
	}
}

// A failing plan holds the partitions of its running steps, not those
// of its steps that will never begin: another plan may take them at
// once, not two minutes later; one refused says the plan is failing.
func TestAFailingPlanHoldsOnlyWhatItStillRuns(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, WaitForRunning: true}
	mv := func(p string) plan.Step {
		return plan.Step{Kind: plan.StepMovePartition, Changefeed: "orders", Partition: p, To: "capture-1"}
	}
	p := &plan.Plan{Version: 1, Kind: "rebalance", Target: "orders", BatchSize: 2, Batches: []plan.Batch{
		{Steps: []plan.Step{mv("p1"), mv("p2")}}, {Steps: []plan.Step{mv("p3")}},
	}}
	r := New("plan-1", p, "ops", c.t)
	run(t, x, r, RequestNone) // p1 and p2 begin
	if _, held := r.Holds(map[string]bool{"p3": true}); !held {
		t.Fatal("a running plan does not hold the partition of its pending step")
	}
	w.lost[plan.StepText(mv("p1"))] = true
	run(t, x, r, RequestNone)
	if r.Failing == nil {
		t.Fatalf("not failing: %s", r.State)
	}
	if step, held := r.Holds(map[string]bool{"p3": true}); held {
		t.Fatalf("a failing plan holds %s, of a step that never begins", step.Partition)
	}
	step, held := r.Holds(map[string]bool{"p2": true})
	if !held || !strings.Contains(r.BusyMessage(step), "plan plan-1 (failing: it ends once its running steps have, at most 2m0s after") {
		t.Fatalf("the running step's partition: held %v, %q", held, r.BusyMessage(step))
	}
}
