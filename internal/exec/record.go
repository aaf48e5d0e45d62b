package exec

// A plan's execution state as it is persisted: the states of the plan
// and of each step (in one transition table), the Record that holds them
// with its log of events, and what a record says of itself (counts, the
// current batch, what it holds, how it ended). Executor moves records
// (exec.go).

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// StepState is where one step is.
type StepState string

const (
	StepPending StepState = "pending"
	StepRunning StepState = "running"
	StepDone    StepState = "done"
	StepFailed  StepState = "failed"
	// StepSkipped: not done, its note says why: what it acts on was
	// removed, or the plan ended first (abandoned, or held past its
	// hold timeout: a drain's steps running then too, which may have
	// moved some of their partitions).
	StepSkipped StepState = "skipped"
	// StepCancelled: the operator cancelled the plan before the step
	// ended. Neither done nor skipped: each step a cancelled plan did not
	// get to says who ended it.
	StepCancelled StepState = "cancelled"
)

// stepTransitions is the whole step state machine.
var stepTransitions = map[StepState][]StepState{
	// Done at once: what the step does had already happened (another
	// scheduler did it, or a previous coordinator did before failing over).
	StepPending: {StepRunning, StepDone, StepSkipped, StepFailed, StepCancelled},
	// Pending again: re-planned.
	StepRunning: {StepDone, StepFailed, StepPending, StepSkipped, StepCancelled},
}

// CheckStep tells whether a step may go from one state to another.
func CheckStep(from, to StepState) error {
	for _, s := range stepTransitions[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("step cannot go from %s to %s", from, to)
}

// State is where a whole plan is.
type State string

const (
	Running   State = "running"
	Paused    State = "paused"
	Done      State = "done"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// Terminal tells whether a plan in this state is over.
func (s State) Terminal() bool { return s == Done || s == Failed || s == Cancelled }

// Request is what an operator asked of a running plan.
type Request string

const (
	RequestNone   Request = ""
	RequestPause  Request = "pause"
	RequestResume Request = "resume"
	RequestCancel Request = "cancel"
)

// StepStatus is one step's execution state.
type StepStatus struct {
	Batch int       `json:"batch"`
	Index int       `json:"index"`
	State StepState `json:"state"`
	// Since is when it entered its state; Started and Ended when it
	// began running and when it ended (done, failed, skipped or
	// cancelled), so a
	// record shows what ran at the same time.
	Since   time.Time  `json:"since"`
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	Note    string     `json:"note,omitempty"`
	// Seq is the sequence number of the event that put the step in its
	// state: a watcher told of the change orders it among the logged
	// events of the same instant (a resume, then the steps it began).
	Seq uint64 `json:"seq,omitempty"`
}

// Record is a plan and its execution, as persisted.
type Record struct {
	Version     int          `json:"version"`
	ID          string       `json:"id"`
	Plan        plan.Plan    `json:"plan"`
	State       State        `json:"state"`
	Steps       []StepStatus `json:"steps"`
	SubmittedBy string       `json:"submitted_by,omitempty"`
	SubmittedAt time.Time    `json:"submitted_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
	FinishedAt  *time.Time   `json:"finished_at,omitempty"`
	Message     string       `json:"message,omitempty"`
	// Seq is the sequence number of the last event.
	Seq uint64 `json:"seq"`
	// Log keeps the last notable events (not step transitions, which the
	// step states already hold), for late watchers.
	Log []Event `json:"log,omitempty"`
	// progressAt: when a step last changed state; stalledAt: when a
	// stall was last reported.
	ProgressAt time.Time  `json:"progress_at"`
	StalledAt  *time.Time `json:"stalled_at,omitempty"`
	// Budget is the plan's lag budget (budget.go); Held, while it holds
	// the plan. Width is how many steps of a batch may run at once since
	// a hold halved it (0: the whole batch); HeldBatch is the batch (plus
	// one) a hold last came in.
	Budget    Budget `json:"budget,omitzero"`
	Held      *Hold  `json:"held,omitempty"`
	Width     int    `json:"width,omitempty"`
	HeldBatch int    `json:"held_batch,omitempty"`
	// Failing is the failure a plan ends with once the steps it left
	// running have ended (a step of it failed; or, where its hold does
	// not outlive it, it was held past its hold timeout): their outcome
	// is then in the record, not a step shown running for ever.
	Failing *Failing `json:"failing,omitempty"`
}

// Failing is a failure waiting for the steps still running.
type Failing struct {
	Since   time.Time `json:"since"`
	Message string    `json:"message"`
}

// MaxLog bounds Record.Log.
const MaxLog = 50

// New makes the record of a plan just submitted.
func New(id string, p *plan.Plan, by string, now time.Time) *Record {
	r := &Record{Version: 1, ID: id, Plan: *p, State: Running, SubmittedBy: by, SubmittedAt: now, UpdatedAt: now, ProgressAt: now}
	r.Plan.ID = id
	for b, batch := range p.Batches {
		for i := range batch.Steps {
			r.Steps = append(r.Steps, StepStatus{Batch: b, Index: i, State: StepPending, Since: now})
		}
	}
	what := p.KindText()
	if p.Target != "" {
		what += " " + string(p.Target)
	}
	r.emit(now, Event{Type: EventSubmitted, Message: fmt.Sprintf("%s: %d batches, %d steps, submitted by %s", what, len(p.Batches), len(r.Steps), nonEmpty(by, "unknown"))}, true)
	return r
}

// Hold pauses a plan just submitted, before any step begins: the
// operator resumes it when it may run (a maintenance window).
func (r *Record) Hold(now time.Time) {
	if r.State == Running {
		r.State = Paused
		r.emit(now, Event{Type: EventPaused, Message: fmt.Sprintf("submitted paused: no step begins until it is resumed ('cdcctl plan resume %s')", r.ID)}, true)
	}
}

func nonEmpty(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// Step returns a step of the plan by its status.
func (r *Record) Step(s StepStatus) plan.Step { return r.Plan.Batches[s.Batch].Steps[s.Index] }

// Holds is a step of a plan not over that has still to act on one of
// partitions (pending or running): such a partition is busy for any
// other plan, which the coordinator refuses at submission and a dry run
// says the same.
func (r *Record) Holds(partitions map[string]bool) (plan.Step, bool) {
	if r.State.Terminal() {
		return plan.Step{}, false
	}
	for _, st := range r.Steps {
		// A failing plan's pending steps never begin: only its running
		// ones hold their partitions.
		pending := st.State == StepPending && r.Failing == nil
		if step := r.Step(st); partitions[step.Partition] && (pending || st.State == StepRunning) {
			return step, true
		}
	}
	return plan.Step{}, false
}

// BusyMessage says what r has still to do to a partition it holds.
func (r *Record) BusyMessage(step plan.Step) string {
	if r.Failing != nil {
		return fmt.Sprintf("plan %s (failing: it ends once its running steps have, at most %s after %s) is still doing %s",
			r.ID, failingWait, r.Failing.Since.UTC().Format(time.RFC3339), plan.StepText(step))
	}
	return fmt.Sprintf("plan %s (%s) still has to %s", r.ID, r.State, plan.StepText(step))
}

// Counts tells how many steps are in each state.
func (r *Record) Counts() map[StepState]int {
	out := map[StepState]int{}
	for _, s := range r.Steps {
		out[s.State]++
	}
	return out
}

// CurrentBatch is the first batch with a step not yet done or skipped;
// len(batches) when all are.
func (r *Record) CurrentBatch() int {
	for _, s := range r.Steps {
		if s.State != StepDone && s.State != StepSkipped {
			return s.Batch
		}
	}
	return len(r.Plan.Batches)
}

func (r *Record) emit(now time.Time, ev Event, notable bool) Event {
	r.Seq++
	ev.Version, ev.Seq, ev.Time, ev.Plan = 1, r.Seq, now, r.ID
	if ev.Progress == nil {
		ev.Progress = progress(r.Counts(), len(r.Steps))
	}
	if notable {
		r.Log = append(r.Log, ev)
		if len(r.Log) > MaxLog {
			r.Log = r.Log[len(r.Log)-MaxLog:]
		}
	}
	return ev
}

// setStep moves step i to a new state through the transition table.
func (r *Record) setStep(i int, to StepState, note string, now time.Time) (Event, error) {
	s := &r.Steps[i]
	if err := CheckStep(s.State, to); err != nil {
		return Event{}, fmt.Errorf("%s: %w", plan.StepText(r.Step(*s)), err)
	}
	s.State, s.Since, s.Note = to, now, note
	switch to {
	case StepRunning:
		s.Started, s.Ended = &now, nil
	case StepDone, StepFailed, StepSkipped, StepCancelled:
		s.Ended = &now
	}
	r.ProgressAt, r.StalledAt = now, nil
	st := r.Step(*s)
	ev := r.emit(now, Event{Type: EventStep, Batch: s.Batch, Index: s.Index, Step: &st, State: to, Message: note}, false)
	s.Seq = ev.Seq
	return ev, nil
}

func (r *Record) finish(state State, message string, now time.Time) Event {
	// A plan done or cancelled holds nothing. A failed one keeps its
	// hold: a drain's record stays held with it (drainHold), rather
	// than what is left moving off its capture unbudgeted.
	r.State, r.Message, r.Failing = state, message, nil
	if state != Failed {
		r.Held = nil
	}
	r.FinishedAt = &now
	typ := map[State]EventType{Done: EventDone, Failed: EventFailed, Cancelled: EventCancelled}[state]
	return r.emit(now, Event{Type: typ, Message: message}, true)
}

// SkipError, returned by Begin, skips the step as Outcome.Skipped does:
// what it acts on was removed on purpose between the step's check and
// its start.
type SkipError struct{ Why string }

func (e *SkipError) Error() string { return e.Why }

// Skip is Begin's way to skip its step, saying why.
func Skip(why string) error { return &SkipError{Why: why} }

// doneMessage says how a plan whose every step ended ended: not "every
// step done" when some, or all, were skipped.
func (r *Record) doneMessage() string {
	done, skipped := 0, 0
	why := map[string]bool{}
	var whys []string
	for _, s := range r.Steps {
		switch s.State {
		case StepDone:
			done++
		case StepSkipped:
			skipped++
			if !why[s.Note] && len(whys) < 3 {
				why[s.Note] = true
				whys = append(whys, s.Note)
			}
		}
	}
	switch {
	case skipped == 0:
		return "every step done"
	case done == 0:
		return fmt.Sprintf("nothing was done: every step was skipped (%s)", strings.Join(whys, "; "))
	}
	return fmt.Sprintf("%d of %d steps done, %d skipped (%s)", done, len(r.Steps), skipped, strings.Join(whys, "; "))
}

// MaxConcurrent is the most steps of a kind that ran at the same time,
// from the steps' start and end times.
func (r *Record) MaxConcurrent(kind plan.StepKind) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range r.Steps {
		if r.Step(s).Kind != kind || s.Started == nil {
			continue
		}
		edges = append(edges, edge{*s.Started, 1})
		if s.Ended != nil {
			edges = append(edges, edge{*s.Ended, -1})
		}
	}
	// Ends before starts at the same instant: a batch ends, then the
	// next begins.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}
