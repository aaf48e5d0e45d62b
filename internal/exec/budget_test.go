package exec

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// wideDrain is a drain whose middle batch moves four maintainers.
func wideDrain() *plan.Plan {
	p := drainPlan()
	p.BatchSize = 4
	var steps []plan.Step
	for _, cf := range []string{"a", "b", "c", "d"} {
		steps = append(steps, plan.Step{Kind: plan.StepMoveMaintainer, Changefeed: cf, From: "capture-3", To: "capture-1"})
	}
	p.Batches[1].Steps = steps
	return p
}

// A plan over its budget holds before its next step (the running ones
// finish), goes on by itself below the resume bound with half as many
// steps at once, grows back after a calm batch, and ends done.
func TestTheLagBudgetHoldsAndResumesAPlan(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	lag := 0 * time.Second
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
	r := New("plan-1", wideDrain(), "ops", c.t)
	r.Budget = Budget{MaxLag: 4 * time.Second}
	run(t, x, r, RequestNone) // Draining begins
	lag = 9 * time.Second
	w.finish()
	evs := run(t, x, r, RequestNone)
	if r.Held == nil || len(w.begun) != 1 {
		t.Fatalf("over the budget: held %+v, begun %v", r.Held, w.begun)
	}
	if last := evs[len(evs)-1]; last.Type != EventHeld || !strings.Contains(last.Message, "changefeed orders lags 9s, over --max-lag 4s") || !strings.Contains(last.Message, "less than 2s") {
		t.Fatalf("the hold's event: %+v", last)
	}
	lag = 3 * time.Second // under the bound, not under the resume bound
	run(t, x, r, RequestNone)
	if r.Held == nil || len(w.begun) != 1 {
		t.Fatalf("between the bounds a held plan went on: held %+v, begun %v", r.Held, w.begun)
	}
	lag = time.Second
	evs = run(t, x, r, RequestNone)
	if r.Held != nil || evs[0].Type != EventUnheld || len(w.begun) != 3 || w.inFlight != 2 {
		t.Fatalf("below the resume bound: held %+v, events %+v, begun %v, in flight %d (want 2 of 4: halved)", r.Held, evs, w.begun, w.inFlight)
	}
	for i := 0; i < 10 && !r.State.Terminal(); i++ {
		w.finish()
		c.t = c.t.Add(time.Second)
		run(t, x, r, RequestNone)
	}
	if r.State != Done || w.maxIn != 2 {
		t.Fatalf("state %s, at most %d at once", r.State, w.maxIn)
	}
}

// Held longer than its hold timeout, a plan fails saying so; steps not
// begun are skipped, those done stay done.
func TestAPlanHeldPastItsTimeoutFails(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", time.Minute, nil }}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 30 * time.Second}
	run(t, x, r, RequestNone)
	c.t = c.t.Add(20 * time.Second)
	run(t, x, r, RequestNone)
	if r.State != Running {
		t.Fatalf("held 20s of 30: %s", r.State)
	}
	c.t = c.t.Add(20 * time.Second)
	run(t, x, r, RequestNone)
	if r.State != Failed || !strings.HasPrefix(r.Message, HoldTimeoutPrefix+"30s") || !strings.Contains(r.Message, "orders lags 1m0s") {
		t.Fatalf("held 40s of 30: %s %q", r.State, r.Message)
	}
	if cnt := r.Counts(); cnt[StepSkipped] != len(r.Steps) || len(w.begun) != 0 {
		t.Fatalf("steps: %v, begun %v", cnt, w.begun)
	}
}

// A budget changed on a running plan applies at its next advance: off,
// the held plan goes on.
func TestABudgetChangedOnARunningPlanApplies(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) {
		return "orders", 8 * time.Second, nil
	}}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second}
	run(t, x, r, RequestNone)
	if r.Held == nil {
		t.Fatal("not held")
	}
	ev := r.SetBudget(Budget{MaxLag: 10 * time.Second}, "ops", c.t)
	if ev.Type != EventBudget || !strings.Contains(ev.Message, "max lag 10s, going on below 5s (was max lag 5s, going on below 2.5s)") {
		t.Fatalf("event %+v", ev)
	}
	run(t, x, r, RequestNone) // held: 8s is not below 5s
	if len(w.begun) != 0 {
		t.Fatalf("began %v", w.begun)
	}
	r.SetBudget(Budget{}, "ops", c.t)
	run(t, x, r, RequestNone)
	if r.Held != nil || len(w.begun) != 1 {
		t.Fatalf("without a budget: held %+v, begun %v", r.Held, w.begun)
	}
}

func TestBudgetsAreChecked(t *testing.T) {
	for _, c := range []struct {
		b    Budget
		want string
	}{
		{Budget{MaxLag: time.Second, ResumeBelow: 2 * time.Second}, "must be below --max-lag"},
		{Budget{HoldTimeout: time.Second}, "give --max-lag too"},
		{Budget{MaxLag: -1}, "0 or more"},
		{Budget{MaxLag: time.Second, ResumeBelow: time.Millisecond, HoldTimeout: time.Minute}, ""},
	} {
		err := c.b.Check()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.b, err, c.want)
		}
	}
}

// After a hold halved it, how many steps run at once grows back by one
// after each batch that ran without a hold, up to the batch size.
func TestTheWidthGrowsBackAfterCalmBatches(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	lag := 9 * time.Second
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
	p := &plan.Plan{Version: 1, Kind: "rebalance", Target: "orders", BatchSize: 4}
	for b := 0; b < 4; b++ {
		var steps []plan.Step
		for i := 0; i < 4; i++ {
			steps = append(steps, plan.Step{Kind: plan.StepMovePartition, Changefeed: "orders", Partition: fmt.Sprintf("p%d-%d", b, i), To: "capture-1"})
		}
		p.Batches = append(p.Batches, plan.Batch{Steps: steps})
	}
	r := New("plan-1", p, "ops", c.t)
	r.Budget = Budget{MaxLag: 4 * time.Second}
	run(t, x, r, RequestNone) // held before the first batch: width 4 → 2
	lag = time.Second
	most := make([]int, 4) // the most steps running at once in each batch
	for i := 0; i < 40 && !r.State.Terminal(); i++ {
		run(t, x, r, RequestNone)
		running := make([]int, 4)
		for _, st := range r.Steps {
			if st.State == StepRunning {
				running[st.Batch]++
			}
		}
		for b := range most {
			most[b] = max(most[b], running[b])
		}
		w.finish()
		c.t = c.t.Add(time.Second)
	}
	if r.State != Done || fmt.Sprint(most) != "[2 2 3 4]" {
		t.Fatalf("state %s; steps at once in each batch %v, want [2 2 3 4] (halved by the hold, then one more after each calm batch)", r.State, most)
	}
}

// A drain held past its hold timeout while steps of it run fails at once
// (its hold stays with it: a running step may never end under it), its
// running steps skipped, saying that what they began finishes, and the
// steps not begun skipped as before. A plan whose hold does not outlive
// it (a move, a split) skips the steps not begun and fails once its
// running steps have ended, which they do by themselves.
func TestAPlanHeldPastItsTimeoutWithStepsRunning(t *testing.T) {
	for _, drain := range []bool{true, false} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			w, c, x, r, _ := heldWithTwoRunning(t, drain)
			c.t = c.t.Add(40 * time.Second)
			run(t, x, r, RequestNone)
			if !drain {
				if r.State != Running || r.Failing == nil || !strings.HasPrefix(r.Failing.Message, HoldTimeoutPrefix+"30s") {
					t.Fatalf("a plan whose hold does not outlive it, held past its timeout with two steps running: %s, failing %+v", r.State, r.Failing)
				}
				if cnt := r.Counts(); cnt[StepRunning] != 2 || cnt[StepSkipped] != 4 {
					t.Fatalf("steps %v: want the 2 running on, the 4 not begun skipped", cnt)
				}
				w.finish()
				run(t, x, r, RequestNone)
				if cnt := r.Counts(); r.State != Failed || !strings.HasPrefix(r.Message, HoldTimeoutPrefix+"30s") || cnt[StepDone] != 3 {
					t.Fatalf("once its running steps ended: %s %q, steps %v", r.State, r.Message, cnt)
				}
				return
			}
			if r.State != Failed || !strings.HasPrefix(r.Message, HoldTimeoutPrefix+"30s") || r.Failing != nil {
				t.Fatalf("held past its timeout with two steps running: %s %q, failing %+v", r.State, r.Message, r.Failing)
			}
			running := 0
			for _, s := range r.Steps {
				if s.State == StepSkipped && strings.HasPrefix(s.Note, "running when the plan was held past --hold-timeout: what it began finishes") {
					running++
				}
			}
			if cnt := r.Counts(); cnt[StepRunning] != 0 || cnt[StepSkipped] != 6 || cnt[StepDone] != 1 || running != 2 {
				t.Fatalf("steps %v (%d skipped while running): want the 2 running and the 4 not begun skipped, the first done", cnt, running)
			}
		})
	}
}

// A plan held while what is left of its batch runs (the steps not begun
// there were skipped meanwhile) still looks at its hold at each advance:
// it goes on below the resume bound, and fails past its hold timeout. It
// did not: the hold was looked at only for a step about to begin, so a
// drain's running steps, waiting for the hold to end, waited for ever.
func TestAHoldWithNothingLeftToBeginStillEnds(t *testing.T) {
	for _, lagStays := range []bool{false, true} {
		t.Run(fmt.Sprintf("lag stays=%v", lagStays), func(t *testing.T) {
			w, c, x, r, lag := heldWithTwoRunning(t, true)
			for _, cf := range []string{"c", "d"} {
				w.removed[plan.StepText(plan.Step{Kind: plan.StepMoveMaintainer, Changefeed: cf, From: "capture-3", To: "capture-1"})] = true
			}
			run(t, x, r, RequestNone) // c and d skipped: nothing left to begin in the batch
			if cnt := r.Counts(); r.Held == nil || cnt[StepRunning] != 2 || cnt[StepSkipped] != 2 {
				t.Fatalf("held %+v, steps %v: want held, 2 running, 2 skipped", r.Held, cnt)
			}
			c.t = c.t.Add(40 * time.Second)
			if lagStays {
				run(t, x, r, RequestNone)
				if r.State != Failed || !strings.HasPrefix(r.Message, HoldTimeoutPrefix+"30s") || r.Counts()[StepRunning] != 0 {
					t.Fatalf("held 40s of 30 with nothing left to begin: %s %q, steps %v", r.State, r.Message, r.Counts())
				}
				return
			}
			*lag = time.Second
			evs := run(t, x, r, RequestNone)
			if r.Held != nil || len(evs) == 0 || evs[len(evs)-1].Type != EventUnheld {
				t.Fatalf("below the resume bound with nothing left to begin: held %+v, events %+v", r.Held, evs)
			}
			w.finish()
			for i := 0; i < 5 && !r.State.Terminal(); i++ {
				run(t, x, r, RequestNone)
				w.finish()
			}
			if r.State != Done || r.Held != nil {
				t.Fatalf("state %s, held %+v", r.State, r.Held)
			}
		})
	}
}

// A hold with nothing left to begin in the whole plan ends at once where
// it holds no running step (a move, a split, a rebalance): the steps
// running finish by themselves, and the plan ends done, not failed past
// its hold timeout for a hold that held nothing back.
func TestAHoldWithNothingLeftToBeginAnywhereHoldsNothing(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	lag := time.Duration(0)
	x := &Executor{Act: w, Now: c.now, WaitForRunning: true, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
	p := &plan.Plan{Version: 1, Kind: "rebalance", Target: "orders", BatchSize: 4}
	var steps []plan.Step
	for i := 0; i < 4; i++ {
		steps = append(steps, plan.Step{Kind: plan.StepMovePartition, Changefeed: "orders", Partition: fmt.Sprintf("p%d", i), To: "capture-1"})
	}
	p.Batches = []plan.Batch{{Steps: steps}}
	r := New("plan-1", p, "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 30 * time.Second}
	lag = 9 * time.Second
	run(t, x, r, RequestNone) // held: half the batch may run at once
	lag = time.Second
	run(t, x, r, RequestNone) // p0 and p1 begin
	lag = time.Minute
	run(t, x, r, RequestNone) // held again
	w.removed[plan.StepText(steps[2])], w.removed[plan.StepText(steps[3])] = true, true
	evs := run(t, x, r, RequestNone)
	if last := evs[len(evs)-1]; r.Held != nil || last.Type != EventUnheld || !strings.Contains(last.Message, "nothing is left to begin") {
		t.Fatalf("nothing left to begin: held %+v, events %+v", r.Held, evs)
	}
	c.t = c.t.Add(40 * time.Second)
	run(t, x, r, RequestNone)
	w.finish()
	run(t, x, r, RequestNone)
	if cnt := r.Counts(); r.State != Done || cnt[StepDone] != 2 || cnt[StepSkipped] != 2 {
		t.Fatalf("%s %q, steps %v: want done, the two running done", r.State, r.Message, cnt)
	}
}

// Time paused does not count toward the hold timeout: a plan paused
// while held, resumed an hour later with the lag between the bounds,
// asks its budget afresh and goes on.
func TestTimePausedDoesNotCountTowardTheHoldTimeout(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	lag := 9 * time.Second
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 10 * time.Minute}
	run(t, x, r, RequestNone)
	if r.Held == nil {
		t.Fatal("not held")
	}
	run(t, x, r, RequestPause)
	if r.Held != nil {
		t.Fatalf("a paused plan shows a hold: %+v", r.Held)
	}
	c.t = c.t.Add(time.Hour)
	lag = 3 * time.Second // under --max-lag, not under the resume bound
	run(t, x, r, RequestResume)
	if r.State != Running || len(w.begun) != 1 {
		t.Fatalf("resumed after an hour paused: %s %q, begun %v", r.State, r.Message, w.begun)
	}
}

// A plan held past its timeout with its lag between the bounds says the
// lag is not yet below the resume bound, not that it is over --max-lag.
func TestTheHoldTimeoutSaysWhichBoundTheLagIsOver(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	lag := 9 * time.Second
	x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 30 * time.Second}
	run(t, x, r, RequestNone)
	lag = 3 * time.Second
	c.t = c.t.Add(40 * time.Second)
	run(t, x, r, RequestNone)
	if r.State != Failed || !strings.Contains(r.Message, "orders lags 3s, not yet below 2.5s (--resume-below)") {
		t.Fatalf("%s %q", r.State, r.Message)
	}
}

// heldWithTwoRunning is wideDrain under a budget (5 s, a hold timeout of
// 30 s) held again with two of its middle batch's four moves running
// (a and b), the lag a minute; lag sets what the budget reads next.
func heldWithTwoRunning(t *testing.T, holdOutlivesPlan bool) (w *world, c *clock, x *Executor, r *Record, lag *time.Duration) {
	t.Helper()
	w, c, lag = newWorld(), &clock{t: time.Unix(1000, 0)}, new(time.Duration)
	x = &Executor{Act: w, Now: c.now, WaitForRunning: true, HoldOutlivesPlan: holdOutlivesPlan,
		Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", *lag, nil }}
	r = New("plan-1", wideDrain(), "ops", c.t)
	r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 30 * time.Second}
	run(t, x, r, RequestNone) // Draining begins
	w.finish()
	*lag = 9 * time.Second
	run(t, x, r, RequestNone) // held: no move begins, half the batch may run at once
	*lag = time.Second
	run(t, x, r, RequestNone) // a and b begin
	if w.inFlight != 2 {
		t.Fatalf("in flight %d, want 2", w.inFlight)
	}
	*lag = time.Minute
	run(t, x, r, RequestNone) // held again, a and b running
	return w, c, x, r, lag
}

// A drain resumed after a pause asks its budget afresh even where no
// step of its batch is left to begin (the rest skipped, two moves
// running): over the bound, it is held again, so that its record holds
// the moves still running (drainHold). It was not: the hold, cleared by
// the pause, was looked at only for a step about to begin.
func TestADrainResumedOverItsBudgetIsHeldAgain(t *testing.T) {
	w, c, x, r, _ := heldWithTwoRunning(t, true)
	for _, cf := range []string{"c", "d"} {
		w.removed[plan.StepText(plan.Step{Kind: plan.StepMoveMaintainer, Changefeed: cf, From: "capture-3", To: "capture-1"})] = true
	}
	run(t, x, r, RequestNone)
	run(t, x, r, RequestPause)
	c.t = c.t.Add(time.Hour)
	run(t, x, r, RequestResume) // the lag still a minute
	if r.State != Running || r.Held == nil || r.Held.Since != c.t {
		t.Fatalf("resumed over the budget with two moves running: %s, held %+v", r.State, r.Held)
	}
}

// A drain that fails for another reason while held keeps its hold, so
// that its record keeps what is left on its capture (drainHold); a plan
// done holds nothing.
func TestAFailedPlanKeepsItsHold(t *testing.T) {
	w, _, x, r, _ := heldWithTwoRunning(t, true)
	w.lost[plan.StepText(r.Step(r.Steps[1]))] = true
	run(t, x, r, RequestNone)
	w.finish()
	run(t, x, r, RequestNone)
	if r.State != Failed || r.Held == nil {
		t.Fatalf("failed while held: %s %q, held %+v", r.State, r.Message, r.Held)
	}
}
