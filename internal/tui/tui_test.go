package tui

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// script serves recorded frames, one per fetch (the last one again once
// they run out), and records the requests the view sends. It stands in
// for the API client, behind the view's own Source interface.
type script struct {
	mu       sync.Mutex
	frames   []Frame
	requests []exec.Request
}

func (s *script) Fetch(context.Context) (Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.frames[0]
	if len(s.frames) > 1 {
		s.frames = s.frames[1:]
	}
	return f, nil
}

func (s *script) Request(_ context.Context, req exec.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	return nil
}

func (s *script) sent() []exec.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]exec.Request(nil), s.requests...)
}

var t0 = time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)

// executed runs a drain plan's record through the executor with a world
// in which every begun step takes effect at the next advance, and returns
// a copy after each advance.
func executed() []*exec.Record {
	mv := func(cf, to string) plan.Step {
		return plan.Step{Kind: plan.StepMoveMaintainer, Changefeed: cf, From: "capture-3", To: nodeID(to)}
	}
	p := &plan.Plan{Version: 1, Kind: "drain", Target: "capture-3", BatchSize: 2, PredictedMillis: 4000, Batches: []plan.Batch{
		{Steps: []plan.Step{{Kind: plan.StepSetLiveness, To: "capture-3", Liveness: "Draining"}}},
		{Steps: []plan.Step{mv("a", "capture-1"), mv("b", "capture-2")}},
		{Steps: []plan.Step{{Kind: plan.StepMovePartitions, Changefeed: "a", From: "capture-3", Count: 6, Spread: map[nodeID]int{"capture-1": 3, "capture-2": 3}}}},
		{Steps: []plan.Step{{Kind: plan.StepSetLiveness, To: "capture-3", Liveness: "Stopping"}}},
	}}
	clock := t0
	r := exec.New("drain-capture-3-1", p, "ops@host", clock)
	w := &world{begun: map[string]bool{}}
	x := &exec.Executor{Act: w, Now: func() time.Time { return clock }}
	var out []*exec.Record
	for !r.State.Terminal() {
		clock = clock.Add(time.Second)
		if _, err := x.Advance(context.Background(), r, exec.RequestNone); err != nil {
			panic(err)
		}
		c := *r
		c.Steps = append([]exec.StepStatus(nil), r.Steps...)
		out = append(out, &c)
		for k := range w.begun {
			w.begun[k] = true
		}
	}
	return out
}

type world struct{ begun map[string]bool }

func (w *world) Check(_ context.Context, _ *plan.Plan, s plan.Step, _ exec.StepState, _ time.Time) (exec.Outcome, error) {
	return exec.Outcome{Done: w.begun[plan.StepText(s)]}, nil
}
func (w *world) Begin(_ context.Context, _ *plan.Plan, s plan.Step) error {
	w.begun[plan.StepText(s)] = false
	return nil
}
func (w *world) Replan(_ context.Context, _ *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	return s, false, nil
}
func (w *world) Abandoned(context.Context, *exec.Record) (string, error) { return "", nil }
func (w *world) Cancel(context.Context, *plan.Plan) error                { return nil }

func nodes(left int) []NodeRow {
	return []NodeRow{
		{Node: "capture-1", Liveness: "Alive", Maintainers: 3, Partitions: 10 + (6-left)/2},
		{Node: "capture-2", Liveness: "Alive", Maintainers: 2, Partitions: 10 + (6-left)/2, Moves: 1},
		{Node: "capture-3", Liveness: "Draining", Maintainers: 0, Partitions: left, Moves: 1},
	}
}

func newTestModel(t *testing.T, src Source, now time.Time) *teatest.TestModel {
	m := New(src, func() time.Time { return now }, 10*time.Millisecond)
	return teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 40),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
}

// The view follows a plan to its end and quits by itself; the final
// screen is a golden file (go test ./internal/tui -update rewrites it).
func TestLiveViewFollowsAPlanToItsEnd(t *testing.T) {
	recs := executed()
	src := &script{}
	for i, r := range recs {
		src.frames = append(src.frames, Frame{Record: r, Nodes: nodes(max(0, 6-2*i))})
	}
	tm := newTestModel(t, src, recs[len(recs)-1].UpdatedAt)
	final := tm.FinalModel(t, teatest.WithFinalTimeout(10*time.Second)).(*Model)
	if final.Detached() || final.Record().State != exec.Done {
		t.Fatalf("detached %v, state %s", final.Detached(), final.Record().State)
	}
	golden.RequireEqual(t, final.Render())
}

// A screen in the middle of a plan, and the keys: p pauses, c asks and y
// cancels, q detaches without touching the plan.
func TestLiveViewKeys(t *testing.T) {
	recs := executed()
	mid := recs[1] // maintainer moves running
	src := &script{frames: []Frame{{Record: mid, Nodes: nodes(6)}}}
	tm := newTestModel(t, src, mid.UpdatedAt.Add(1500*time.Millisecond))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return strings.Contains(string(b), "q detach") },
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyPressMsg{Code: 'p', Text: "p"})
	tm.Send(tea.KeyPressMsg{Code: 'c', Text: "c"})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return strings.Contains(string(b), "[y/N]") },
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyPressMsg{Code: 'y', Text: "y"})
	deadline := time.Now().Add(5 * time.Second)
	for len(src.sent()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	tm.Send(tea.KeyPressMsg{Code: 'q', Text: "q"})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*Model)
	if got := src.sent(); len(got) != 2 || got[0] != exec.RequestPause || got[1] != exec.RequestCancel {
		t.Fatalf("requests sent: %v, want pause then cancel", got)
	}
	if !final.Detached() {
		t.Fatal("q did not detach")
	}
	golden.RequireEqual(t, final.Render())
}

type nodeID = model.NodeID

// screenAt renders the view after one frame, at a given time.
func screenAt(f Frame, now time.Time) string {
	m := New(nil, func() time.Time { return now }, time.Second)
	m.Update(frameMsg{f: f})
	return m.Render()
}

// At every frame of a drain, each bar counts what the steps say is done:
// never "all moved" while a step of its kind is pending or running. The frames' capture table lags and
// leads the steps on purpose (nodes(...)): the bars must not read it.
func TestTheBarsAgreeWithTheSteps(t *testing.T) {
	for i, r := range executed() {
		for _, left := range []int{0, 6} {
			screen := screenAt(Frame{Record: r, Nodes: nodes(left)}, r.UpdatedAt)
			var mDone, mAll, pDone, pAll int
			for _, line := range strings.Split(screen, "\n") {
				f := strings.Fields(line)
				if len(f) == 4 && f[3] == "moved" {
					var done, all int
					if _, err := fmt.Sscanf(f[2], "%d/%d", &done, &all); err != nil {
						t.Fatalf("frame %d: bar %q: %v", i, line, err)
					}
					if f[0] == "maintainers" {
						mDone, mAll = done, all
					} else {
						pDone, pAll = done, all
					}
				}
			}
			var mSteps, pSteps int
			for _, st := range r.Steps {
				if st.State != exec.StepDone {
					continue
				}
				switch r.Step(st).Kind {
				case plan.StepMoveMaintainer:
					mSteps++
				case plan.StepMovePartitions:
					pSteps += r.Step(st).Count
				}
			}
			if mDone != mSteps || pDone != pSteps || mAll != 2 || pAll != 6 {
				t.Fatalf("frame %d (capture table says %d left): bars %d/%d and %d/%d moved, steps done say %d and %d:\n%s",
					i, left, mDone, mAll, pDone, pAll, mSteps, pSteps, screen)
			}
		}
	}
}

// While a plan is paused its ETA stands still, and says it waits for the
// resume; once resumed it counts down from where it stood.
func TestTheETAStandsStillWhilePaused(t *testing.T) {
	recs := executed()
	r := *recs[1] // maintainer moves running, nothing but the first step done
	r.Steps = append([]exec.StepStatus(nil), r.Steps...)
	x := &exec.Executor{Act: &world{begun: map[string]bool{}}}
	at := r.UpdatedAt
	x.Now = func() time.Time { return at }
	if _, err := x.Advance(context.Background(), &r, exec.RequestPause); err != nil {
		t.Fatal(err)
	}
	if r.State != exec.Paused {
		t.Fatalf("state %s", r.State)
	}
	eta := func(now time.Time) string {
		line := strings.SplitN(screenAt(Frame{Record: &r}, now), "\n", 2)[0]
		return line[strings.Index(line, "ETA ")+4:]
	}
	first, later := eta(at.Add(time.Second)), eta(at.Add(10*time.Minute))
	if first != later || !strings.HasSuffix(first, " once resumed") {
		t.Fatalf("paused: ETA %q after 1 s, %q after 10 min", first, later)
	}
	at = at.Add(10 * time.Minute)
	if _, err := x.Advance(context.Background(), &r, exec.RequestResume); err != nil {
		t.Fatal(err)
	}
	resumed := eta(at)
	if resumed == first || strings.Contains(resumed, "resumed") {
		t.Fatalf("resumed: ETA %q (paused it was %q)", resumed, first)
	}
	d1, _ := time.ParseDuration(strings.TrimSuffix(first, " once resumed"))
	d2, _ := time.ParseDuration(resumed)
	if d2 > d1 {
		t.Fatalf("the ETA grew across a 10-minute pause: %s, then %s", d1, d2)
	}
}

// A plan held by its lag budget says so under its title: which changefeed
// lags how much, and below what it goes on; once it goes on, the line is
// gone.
func TestTheLiveViewShowsAHold(t *testing.T) {
	r := *executed()[1]
	r.Budget = exec.Budget{MaxLag: 5 * time.Second}
	r.Held = &exec.Hold{Since: t0.Add(time.Minute), Changefeed: "orders", Lag: 7200 * time.Millisecond}
	screen := screenAt(Frame{Record: &r}, r.UpdatedAt)
	if want := "HELD by the lag budget since 08:01:00: changefeed orders lags 7.2s, over 5s; goes on below 2.5s"; strings.Split(screen, "\n")[1] != want {
		t.Fatalf("second line %q, want %q:\n%s", strings.Split(screen, "\n")[1], want, screen)
	}
	r.Held = nil
	if screen := screenAt(Frame{Record: &r}, r.UpdatedAt); strings.Contains(screen, "HELD") {
		t.Fatalf("not held, yet:\n%s", screen)
	}
}

// A plan that is to fail once its running steps end says so under its
// title, with why; the line goes with the failure.
func TestTheLiveViewShowsAPlanFailing(t *testing.T) {
	r := *executed()[1]
	r.Failing = &exec.Failing{Since: t0.Add(time.Minute), Message: "move p3 to capture-2: its partition is gone"}
	screen := screenAt(Frame{Record: &r}, r.UpdatedAt)
	if want := "FAILING since 08:01:00, once its running steps end: move p3 to capture-2: its partition is gone"; strings.Split(screen, "\n")[1] != want {
		t.Fatalf("second line %q, want %q:\n%s", strings.Split(screen, "\n")[1], want, screen)
	}
	r.State = exec.Failed
	if screen := screenAt(Frame{Record: &r}, r.UpdatedAt); strings.Contains(screen, "FAILING") {
		t.Fatalf("failed, yet:\n%s", screen)
	}
}

// failing answers every fetch with err, and counts them.
type failing struct {
	err     error
	fetches atomic.Int32
}

func (f *failing) Fetch(context.Context) (Frame, error) {
	f.fetches.Add(1)
	return Frame{}, f.err
}
func (f *failing) Request(context.Context, exec.Request) error { return nil }

// An answer that waiting will not change (Final: no such plan, a token
// refused) ends the view at once with that error; any other is shown
// and the view fetches again.
func TestAFinalErrorEndsTheViewAndATransientOneDoesNot(t *testing.T) {
	refused := fmt.Errorf("plan nope not found")
	tm := newTestModel(t, &failing{err: Final(refused)}, t0)
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*Model)
	if final.Err() != refused {
		t.Fatalf("the view ended with %v, want %v", final.Err(), refused)
	}

	down := &failing{err: fmt.Errorf("connection refused")}
	tm = newTestModel(t, down, t0)
	for deadline := time.Now().Add(5 * time.Second); down.fetches.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the view stopped fetching after %d transient errors", down.fetches.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	tm.Send(tea.KeyPressMsg{Code: 'q', Text: "q"})
	final = tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*Model)
	if final.Err() != nil || !final.Detached() {
		t.Fatalf("a transient error ended the view: err %v, detached %v", final.Err(), final.Detached())
	}
}

// A plan that moves nothing of a kind (a split moves neither maintainers
// nor partitions) draws that bar empty and says so: a full bar over
// "0/0 moved" read as work done that was never there.
func TestABarWithNothingToMoveIsNotDrawnFull(t *testing.T) {
	p := &plan.Plan{Version: 1, Kind: "split", Target: "p7", Batches: []plan.Batch{
		{Steps: []plan.Step{{Kind: plan.StepSplitPartition, Changefeed: "demo", Partition: "p7", Key: "m"}}},
	}}
	r := exec.New("split-p7-1", p, "ops@host", t0)
	screen := screenAt(Frame{Record: r}, t0.Add(time.Second))
	bars := 0
	for _, line := range strings.Split(screen, "\n") {
		if !strings.HasPrefix(line, "maintainers ") && !strings.HasPrefix(line, "partitions  ") {
			continue
		}
		bars++
		if strings.Contains(line, "=") || !strings.HasSuffix(line, "] nothing to move") {
			t.Errorf("bar %q: want it empty, saying nothing to move", line)
		}
	}
	if bars != 2 {
		t.Fatalf("%d bars, want 2:\n%s", bars, screen)
	}
}

// abandoning is world whose drained capture dies once why is set.
type abandoning struct {
	world
	why string
}

func (a *abandoning) Abandoned(context.Context, *exec.Record) (string, error) { return a.why, nil }

// A drain abandoned while its partitions moved ends with them skipped,
// and its bar says they were not moved: it used to read "6/6 moved".
func TestTheBarsOfAnAbandonedDrainCountOnlyWhatMoved(t *testing.T) {
	p := &plan.Plan{Version: 1, Kind: "drain", Target: "capture-3", Batches: []plan.Batch{
		{Steps: []plan.Step{{Kind: plan.StepMoveMaintainer, Changefeed: "a", From: "capture-3", To: "capture-1"}}},
		{Steps: []plan.Step{{Kind: plan.StepMovePartitions, Changefeed: "a", From: "capture-3", Count: 6, Spread: map[nodeID]int{"capture-1": 6}}}},
	}}
	r := exec.New("drain-capture-3-1", p, "ops@host", t0)
	w := &abandoning{world: world{begun: map[string]bool{}}}
	x := &exec.Executor{Act: w, Now: func() time.Time { return t0 }}
	for i := 0; i < 3; i++ { // the maintainer moves; the partitions begin to
		if i == 2 {
			w.why = "capture-3 is gone"
		}
		if _, err := x.Advance(context.Background(), r, exec.RequestNone); err != nil {
			t.Fatal(err)
		}
		for k := range w.begun {
			w.begun[k] = true
		}
	}
	screen := screenAt(Frame{Record: r}, t0)
	if r.State != exec.Failed || !strings.Contains(screen, "] 1/1 moved\n") || !strings.Contains(screen, "] 0/6 moved\n") {
		t.Fatalf("plan %s; want 1/1 maintainers and 0/6 partitions moved:\n%s", r.State, screen)
	}
}
