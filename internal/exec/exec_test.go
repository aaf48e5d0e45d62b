package exec

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// world is a tiny cluster the actuator acts on: which steps have taken
// effect, and which destinations exist. It is the executor's own
// interface under test here, not a stand-in for etcd.
type world struct {
	begun   map[string]int  // step text → Begin calls
	effect  map[string]bool // step text → taken effect
	gone    map[string]bool // destinations that left
	lost    map[string]bool // steps whose object is gone for good
	removed map[string]bool // steps whose object the operator removed
	// skipAtBegin: steps whose object is removed as they begin
	skipAtBegin map[string]bool
	spare       string // where a step whose destination left goes instead
	abandon     string
	cancelled   bool
	inFlight    int // steps begun and not yet in effect
	maxIn       int
}

func newWorld() *world {
	return &world{begun: map[string]int{}, effect: map[string]bool{}, gone: map[string]bool{}, lost: map[string]bool{}, removed: map[string]bool{}}
}

func (w *world) Check(_ context.Context, _ *plan.Plan, s plan.Step, state StepState, _ time.Time) (Outcome, error) {
	k := plan.StepText(s)
	if w.lost[k] {
		return Outcome{Failed: "its partition is gone"}, nil
	}
	if w.removed[k] {
		return Outcome{Skipped: "changefeed " + s.Changefeed + " was removed"}, nil
	}
	if w.effect[k] {
		return Outcome{Done: true, Note: "took effect"}, nil
	}
	if w.gone[string(s.To)] {
		return Outcome{Impossible: string(s.To) + " left"}, nil
	}
	return Outcome{}, nil
}

func (w *world) Begin(_ context.Context, _ *plan.Plan, s plan.Step) error {
	if w.skipAtBegin[plan.StepText(s)] {
		return Skip("changefeed " + s.Changefeed + " was removed")
	}
	w.begun[plan.StepText(s)]++
	w.inFlight++
	w.maxIn = max(w.maxIn, w.inFlight)
	return nil
}

func (w *world) Replan(_ context.Context, _ *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	if w.spare == "" {
		return s, false, nil
	}
	s.To = model.NodeID("capture-" + w.spare)
	return s, true, nil
}

func (w *world) Abandoned(context.Context, *Record) (string, error) { return w.abandon, nil }

func (w *world) Cancel(context.Context, *plan.Plan) error { w.cancelled = true; return nil }

// finish makes every begun step take effect.
func (w *world) finish() {
	for k := range w.begun {
		if !w.effect[k] {
			w.effect[k] = true
			w.inFlight--
		}
	}
}

func drainPlan() *plan.Plan {
	mv := func(cf, to string) plan.Step {
		return plan.Step{Kind: plan.StepMoveMaintainer, Changefeed: cf, From: "capture-3", To: modelNode(to)}
	}
	return &plan.Plan{Version: 1, Kind: "drain", Target: "capture-3", BatchSize: 2, Batches: []plan.Batch{
		{Steps: []plan.Step{{Kind: plan.StepSetLiveness, To: "capture-3", Liveness: "Draining"}}},
		{Steps: []plan.Step{mv("a", "capture-1"), mv("b", "capture-2")}},
		{Steps: []plan.Step{mv("c", "capture-1")}},
		{Steps: []plan.Step{{Kind: plan.StepSetLiveness, To: "capture-3", Liveness: "Stopping"}}},
	}}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func run(t *testing.T, x *Executor, r *Record, req Request) []Event {
	t.Helper()
	evs, err := x.Advance(context.Background(), r, req)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestBatchesRunInOrderAndNeverOverlap(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	r := New("plan-1", drainPlan(), "ops", c.t)
	for i := 0; i < 10 && !r.State.Terminal(); i++ {
		run(t, x, r, RequestNone)
		w.finish()
		c.t = c.t.Add(time.Second)
	}
	if r.State != Done || w.maxIn > 2 || len(w.begun) != 5 || r.MaxConcurrent(plan.StepMoveMaintainer) != 2 {
		t.Fatalf("state %s, at most %d in flight, %d steps begun", r.State, w.maxIn, len(w.begun))
	}
	for k, n := range w.begun {
		if n != 1 {
			t.Fatalf("%s begun %d times", k, n)
		}
	}
	if last := r.Log[len(r.Log)-1]; last.Type != EventDone {
		t.Fatalf("last notable event %+v", last)
	}
}

func TestPauseResumeCancel(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	r := New("plan-1", drainPlan(), "ops", c.t)
	run(t, x, r, RequestNone) // the liveness step begins
	w.finish()
	evs := run(t, x, r, RequestPause)
	if r.State != Paused || evs[0].Type != EventPaused {
		t.Fatalf("after pause: %s, %+v", r.State, evs)
	}
	run(t, x, r, RequestNone)
	if len(w.begun) != 1 {
		t.Fatalf("a paused plan began steps: %v", w.begun)
	}
	run(t, x, r, RequestResume)
	if r.State != Running || len(w.begun) != 3 {
		t.Fatalf("after resume: %s, begun %v", r.State, w.begun)
	}
	evs = run(t, x, r, RequestCancel)
	c2 := r.Counts()
	if r.State != Cancelled || !w.cancelled || evs[len(evs)-1].Type != EventCancelled || c2[StepCancelled] != 4 || c2[StepDone] != 1 {
		t.Fatalf("after cancel: %s, counts %v", r.State, c2)
	}
	if evs := run(t, x, r, RequestResume); len(evs) != 0 || r.State != Cancelled {
		t.Fatalf("a cancelled plan moved again: %+v", evs)
	}
}

// A plan submitted paused begins nothing until it is resumed, and the
// time it waited does not count towards its pace.
func TestAPlanHeldAtSubmissionWaitsForTheResume(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	r := New("plan-1", drainPlan(), "ops", c.t)
	r.Hold(c.t)
	if r.State != Paused || r.Log[len(r.Log)-1].Type != EventPaused {
		t.Fatalf("held: %s, log %+v", r.State, r.Log)
	}
	for i := 0; i < 3; i++ {
		c.t = c.t.Add(time.Minute)
		run(t, x, r, RequestNone)
	}
	if len(w.begun) != 0 {
		t.Fatalf("a held plan began %v", w.begun)
	}
	if got := r.PausedFor(c.t); got != 3*time.Minute {
		t.Fatalf("paused for %s, want 3m", got)
	}
	run(t, x, r, RequestResume)
	if r.State != Running || len(w.begun) != 1 {
		t.Fatalf("after resume: %s, begun %v", r.State, w.begun)
	}
	c.t = c.t.Add(time.Minute)
	if got := r.PausedFor(c.t); got != 3*time.Minute {
		t.Fatalf("paused for %s after the resume, want 3m", got)
	}
}

func TestImpossibleStepsAreReplannedOrReportedStalled(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now, StallAfter: 10 * time.Second}
	r := New("plan-1", drainPlan(), "ops", c.t)
	run(t, x, r, RequestNone)
	w.finish()
	run(t, x, r, RequestNone) // a → capture-1 and b → capture-2 running
	w.gone["capture-2"] = true
	evs := run(t, x, r, RequestNone)
	if r.Counts()[StepRunning] != 2 || len(evs) != 0 {
		t.Fatalf("without a spare, b waits where it is: %v %+v", r.Counts(), evs)
	}
	c.t = c.t.Add(11 * time.Second)
	evs = run(t, x, r, RequestNone)
	if len(evs) != 1 || evs[0].Type != EventStalled || !strings.Contains(evs[0].Message, "capture-2 left") {
		t.Fatalf("want one stalled event naming capture-2: %+v", evs)
	}
	if evs = run(t, x, r, RequestNone); len(evs) != 0 {
		t.Fatalf("the stall was reported twice: %+v", evs)
	}
	w.spare = "4"
	evs = run(t, x, r, RequestNone)
	var replanned *Event
	for i := range evs {
		if evs[i].Type == EventReplanned {
			replanned = &evs[i]
		}
	}
	if replanned == nil || !strings.Contains(replanned.Message, "capture-2 left") || replanned.Step.To != "capture-4" {
		t.Fatalf("replanned: %+v", evs)
	}
	if got := r.Plan.Batches[1].Steps[1].To; got != "capture-4" {
		t.Fatalf("the plan still sends b to %s", got)
	}
}

// A record survives its coordinator: persisted as JSON and advanced by a
// new executor, it goes on without beginning a step twice.
func TestRecordResumesAfterFailover(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	r := New("plan-1", drainPlan(), "ops", c.t)
	run(t, &Executor{Act: w, Now: c.now}, r, RequestNone)
	w.finish()
	run(t, &Executor{Act: w, Now: c.now}, r, RequestNone) // batch 2 running
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var loaded Record
	if err := json.Unmarshal(b, &loaded); err != nil {
		t.Fatal(err)
	}
	x := &Executor{Act: w, Now: c.now}
	for i := 0; i < 10 && !loaded.State.Terminal(); i++ {
		run(t, x, &loaded, RequestNone)
		w.finish()
	}
	if loaded.State != Done {
		t.Fatalf("state %s", loaded.State)
	}
	for k, n := range w.begun {
		if n != 1 {
			t.Fatalf("%s begun %d times across the failover", k, n)
		}
	}
}

func TestAbandonedPlanFails(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	r := New("plan-1", drainPlan(), "ops", c.t)
	w.abandon = "capture-3 left the cluster"
	evs := run(t, &Executor{Act: w, Now: c.now}, r, RequestNone)
	if r.State != Failed || evs[len(evs)-1].Type != EventFailed || r.Message != w.abandon {
		t.Fatalf("state %s, message %q", r.State, r.Message)
	}
}

func TestStepTransitions(t *testing.T) {
	for _, tt := range []struct {
		from, to StepState
		ok       bool
	}{
		{StepPending, StepRunning, true}, {StepPending, StepDone, true}, {StepRunning, StepDone, true},
		{StepRunning, StepPending, true}, {StepDone, StepRunning, false}, {StepSkipped, StepPending, false},
		{StepFailed, StepRunning, false}, {StepDone, StepDone, false},
	} {
		if err := CheckStep(tt.from, tt.to); (err == nil) != tt.ok {
			t.Errorf("%s → %s: %v", tt.from, tt.to, err)
		}
	}
}

func modelNode(s string) model.NodeID { return model.NodeID(s) }

// A watcher that polls sees every step's latest state and every notable
// event once, with the terminal event last.
func TestDeltaReplaysWhatAWatcherMissed(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	r := New("plan-1", drainPlan(), "ops", c.t)
	var seen []Event
	var stream Stream
	for i := 0; i < 10 && !r.State.Terminal(); i++ {
		run(t, x, r, RequestNone)
		w.finish()
		c.t = c.t.Add(time.Second)
		if i%2 == 1 { // polls every other advance
			b, _ := json.Marshal(r)
			var snap Record
			_ = json.Unmarshal(b, &snap)
			seen = append(seen, stream.Next(&snap)...)
		}
	}
	seen = append(seen, stream.Next(r)...)
	if len(seen) == 0 || seen[0].Type != EventSubmitted || seen[len(seen)-1].Type != EventDone {
		t.Fatalf("first %+v, last %+v", seen[0], seen[len(seen)-1])
	}
	// The stream numbers what it sent: 1, 2, 3, ... (the record's own
	// sequence repeats for derived step events and skips unlogged ones).
	for i, ev := range seen {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d of the stream has seq %d: %+v", i+1, ev.Seq, ev)
		}
	}
	// Step events count the steps as they stood after each: the done
	// count grows line by line, never shows the final count early.
	doneEvents := 0
	for _, ev := range seen {
		if ev.Type != EventStep {
			continue
		}
		if ev.State == StepDone {
			doneEvents++
		}
		if ev.Progress.Done != doneEvents {
			t.Fatalf("after %d step events done, a line says %d/%d done", doneEvents, ev.Progress.Done, ev.Progress.Total)
		}
	}
	doneSteps := map[string]bool{}
	for _, ev := range seen {
		if ev.Type == EventStep && ev.State == StepDone {
			doneSteps[plan.StepText(*ev.Step)] = true
		}
	}
	if len(doneSteps) != 5 {
		t.Fatalf("saw %d steps done, want 5: %v", len(doneSteps), doneSteps)
	}
}

// A Last-Event-ID no stream could have sent is refused: at the uint64
// maximum the next id would wrap to 0 and repeat ids the client saw.
func TestAStreamRefusesToGoOnAfterAnIDItCannotExceed(t *testing.T) {
	var s Stream
	for _, n := range []uint64{MaxEventID + 1, math.MaxUint64} {
		if err := s.After(n); !errors.Is(err, ErrEventID) {
			t.Fatalf("After(%d) = %v; want ErrEventID", n, err)
		}
	}
	if err := s.After(MaxEventID - 1); err != nil {
		t.Fatal(err)
	}
	rec := &Record{State: Running, Log: []Event{{Seq: 1, Type: EventSubmitted}}}
	evs := s.Next(rec)
	if len(evs) == 0 || evs[0].Seq != MaxEventID {
		t.Fatalf("after MaxEventID-1 the stream sent %+v; want the id MaxEventID first", evs)
	}
}

// A step whose object the operator removed (its changefeed) is skipped
// with why, and the plan goes on to the end: it used to fail the whole
// plan, the other changefeeds' steps with it.
func TestAStepWhoseChangefeedWasRemovedIsSkippedAndThePlanGoesOn(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	p := drainPlan()
	w.removed[plan.StepText(p.Batches[1].Steps[1])] = true
	r := New("plan-1", p, "ops", c.t)
	for i := 0; i < 10 && !r.State.Terminal(); i++ {
		run(t, x, r, RequestNone)
		w.finish()
		c.t = c.t.Add(time.Second)
	}
	if r.State != Done {
		t.Fatalf("plan %s: %s", r.State, r.Message)
	}
	skipped := 0
	for _, s := range r.Steps {
		switch {
		case s.State == StepSkipped && s.Batch == 1 && s.Index == 1 && s.Note == "changefeed b was removed":
			skipped++
		case s.State != StepDone:
			t.Errorf("step %d.%d: %s (%s)", s.Batch, s.Index, s.State, s.Note)
		}
	}
	if skipped != 1 || len(w.begun) != 4 {
		t.Fatalf("%d steps skipped, %d begun; want 1 and the 4 others", skipped, len(w.begun))
	}
	if want := "4 of 5 steps done, 1 skipped (changefeed b was removed)"; r.Message != want {
		t.Fatalf("plan ended %q, want %q", r.Message, want)
	}
}

// A changefeed removed between a step's check and its start: Begin says
// so, and the step is skipped as a check would have, not failed.
func TestAStepWhoseChangefeedIsRemovedAsItBeginsIsSkipped(t *testing.T) {
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	p := drainPlan()
	w.skipAtBegin = map[string]bool{plan.StepText(p.Batches[1].Steps[0]): true}
	r := New("plan-1", p, "ops", c.t)
	// One step at a time, as after a lag budget's hold in batch 1 (which
	// keeps the width from growing back): the skipped step must not hold
	// b's place.
	r.Width, r.HeldBatch = 1, 1
	for i := 0; i < 10 && !r.State.Terminal(); i++ {
		run(t, x, r, RequestNone)
		if r.Steps[1].State == StepSkipped && r.Steps[2].State == StepPending {
			t.Fatalf("a's step skipped at its start, and b's not begun in the same pass (width %d)", r.Width)
		}
		w.finish()
		c.t = c.t.Add(time.Second)
	}
	if r.State != Done || r.Steps[1].State != StepSkipped || r.Steps[1].Note != "changefeed a was removed" {
		t.Fatalf("plan %s (%s); changefeed a's step %s (%s)", r.State, r.Message, r.Steps[1].State, r.Steps[1].Note)
	}
	if cnt := r.Counts(); cnt[StepDone] != len(r.Steps)-1 {
		t.Fatalf("steps: %v", cnt)
	}
}

// A step event says its batch and index in NDJSON, the first's 0 too
// (omitted when 0, the first step had neither); other events have none.
func TestAStepEventGivesItsBatchAndIndexEvenWhenZero(t *testing.T) {
	st := plan.Step{Kind: plan.StepMovePartition}
	b, err := json.Marshal(Event{Version: 1, Seq: 2, Plan: "p", Type: EventStep, Step: &st, State: StepRunning})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"batch":0`) || !strings.Contains(string(b), `"index":0`) || strings.Count(string(b), `"batch"`) != 1 {
		t.Fatalf("the first step's event: %s", b)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil || back.Step == nil || back.Type != EventStep {
		t.Fatalf("read back: %+v, %v", back, err)
	}
	b, _ = json.Marshal(Event{Version: 1, Seq: 3, Plan: "p", Type: EventPaused})
	if strings.Contains(string(b), `"batch"`) || strings.Contains(string(b), `"index"`) {
		t.Fatalf("a plan's event has a batch: %s", b)
	}
}
