package exec

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// A step the operator cancelled is counted as cancelled, not done: a
// one-step plan cancelled mid-way used to end on "[1/1 done]".
func TestACancelledStepIsNotCountedDone(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	p := &plan.Plan{Version: 1, Kind: "move", Target: "p7", Batches: []plan.Batch{
		{Steps: []plan.Step{{Kind: plan.StepMovePartition, Partition: "p7", From: "capture-1", To: "capture-2"}}},
	}}
	r := New("plan-1", p, "ops", c.t)
	run(t, x, r, RequestNone) // the move begins
	c.t = c.t.Add(time.Second)
	evs := run(t, x, r, RequestCancel)
	// What the coordinator sends as it happens, and what a watcher that
	// came late gets from the record.
	for _, evs := range [][]Event{evs, Delta(nil, r)} {
		last := evs[len(evs)-1]
		var step *Event
		for i := range evs {
			if evs[i].Type == EventStep && evs[i].Time.Equal(c.t) {
				step = &evs[i]
			}
		}
		if step == nil || string(step.State) != "cancelled" {
			t.Fatalf("the cancelled step's event: %+v", step)
		}
		for _, ev := range []Event{*step, last} {
			b, _ := json.Marshal(ev.Progress)
			if ev.Progress == nil || ev.Progress.Done != 0 || !strings.Contains(string(b), `"cancelled":1`) {
				t.Fatalf("%s event counts %s; want 0 done, 1 cancelled", ev.Type, b)
			}
		}
	}
	if string(r.Steps[0].State) != "cancelled" {
		t.Fatalf("the stored step is %s (%s)", r.Steps[0].State, r.Steps[0].Note)
	}
}

// A watcher sees a resumed plan's events in the order they happened:
// resumed, then the step that began. At the same instant, the step's
// state used to come first ("running", then "resumed").
func TestAWatcherSeesResumedBeforeTheStepItBegins(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Hold(c.t)
	var s Stream
	s.Next(r) // the watcher saw it paused
	c.t = c.t.Add(time.Second)
	run(t, x, r, RequestResume)
	// What a watch prints (its stream over the API's record, read back
	// from JSON), and what a watcher that came late gets.
	b, _ := json.Marshal(r)
	var after Record
	_ = json.Unmarshal(b, &after)
	for name, evs := range map[string][]Event{"watching": s.Next(&after), "late": Delta(nil, &after)} {
		var order []string
		for _, ev := range evs {
			if ev.Time.Equal(c.t) {
				order = append(order, string(ev.Type)+" "+string(ev.State))
			}
		}
		if len(order) != 2 || order[0] != "resumed " || order[1] != "step running" {
			t.Errorf("%s: %q; want resumed, then the step running", name, order)
		}
	}
}

// Steps a plan never got to because it ended first (the cluster
// abandoned it, or its lag budget held it past --hold-timeout) are
// skipped, and counted skipped, not done: such a drain that stopped after
// its first step used to end on "[5/5 done]".
func TestStepsAnEndedPlanDidNotGetToAreNotCountedDone(t *testing.T) {
	for _, tt := range []struct {
		name string
		hold bool
	}{{"abandoned", false}, {"held past its hold timeout", true}} {
		t.Run(tt.name, func(t *testing.T) {
			w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
			lag := time.Duration(0)
			x := &Executor{Act: w, Now: c.now, Lag: func(context.Context, *plan.Plan) (string, time.Duration, error) { return "orders", lag, nil }}
			r := New("plan-1", drainPlan(), "ops", c.t)
			r.Budget = Budget{MaxLag: 5 * time.Second, HoldTimeout: 30 * time.Second}
			run(t, x, r, RequestNone) // Draining begins
			w.finish()
			c.t = c.t.Add(time.Second)
			if tt.hold {
				lag = time.Minute
			}
			run(t, x, r, RequestNone) // Draining done; the two moves begin, or the plan is held
			if tt.hold {
				c.t = c.t.Add(40 * time.Second)
			} else {
				w.abandon = "capture-3 is gone"
			}
			evs := run(t, x, r, RequestNone)
			if r.State != Failed {
				t.Fatalf("plan %s: %s", r.State, r.Message)
			}
			// What the coordinator sends, and what a watcher gets from
			// the record read back.
			b, _ := json.Marshal(r)
			stored, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for name, evs := range map[string][]Event{"sent": evs, "read back": Delta(nil, stored)} {
				last := evs[len(evs)-1]
				got, _ := json.Marshal(last.Progress)
				if want := `{"done":1,"skipped":4,"running":0,"total":5}`; last.Type != EventFailed || string(got) != want {
					t.Errorf("%s: the %s event counts %s; want %s", name, last.Type, got, want)
				}
			}
		})
	}
}
