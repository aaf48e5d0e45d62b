// Package exec runs an approved plan: batch after batch, each step begun
// through an Actuator and checked until it has taken effect; step states
// in one transition table; pause, resume and cancel; a step that became
// impossible is re-planned through the Actuator and a "replanned" event
// says what changed; no progress for StallAfter gives a "stalled" event
// naming what is stuck.
//
// The whole execution state is a Record, which the caller persists after
// every Advance that changed it: a new coordinator loads the record and
// goes on, because Begin is idempotent and Check reads the cluster.
//
// It imports plan and model only; it never imports the engine.
package exec

import (
	"context"
	"errors"
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
	// hold timeout).
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
		if step := r.Step(st); partitions[step.Partition] && (st.State == StepPending || st.State == StepRunning) {
			return step, true
		}
	}
	return plan.Step{}, false
}

// BusyMessage says what r has still to do to a partition it holds.
func (r *Record) BusyMessage(step plan.Step) string {
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
	r.State, r.Message = state, message
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

// Outcome is what a check of a step found.
type Outcome struct {
	// Done: the step has taken effect.
	Done bool
	// Impossible says why the step can no longer happen as planned (its
	// destination left, say); the executor asks for a replacement.
	Impossible string
	// Waiting says why a step cannot start yet (no destination at all);
	// it is reported as a stall and checked again.
	Waiting string
	// Failed says why the step can never take effect (what it acts on is
	// gone); the plan fails with it.
	Failed string
	// Skipped says why the step is no longer needed: what it acts on was
	// removed on purpose (its changefeed, say). The step is skipped and
	// the plan goes on.
	Skipped string
	// Note, with Done, is what the step measured or produced (a split's
	// new partition and its pause, say), kept in the step's status.
	Note string
}

// Actuator is the engine as the executor sees it.
type Actuator interface {
	// Check tells whether a step has taken effect, may go on, or can no
	// longer happen as planned. since is when the step entered its state.
	Check(ctx context.Context, p *plan.Plan, s plan.Step, state StepState, since time.Time) (Outcome, error)
	// Begin starts a step. It may be called again for the same step
	// (after a coordinator failover), and must then change nothing more.
	Begin(ctx context.Context, p *plan.Plan, s plan.Step) error
	// Replan returns what to do instead of a step that can no longer
	// happen; ok is false if there is nothing to do instead right now.
	Replan(ctx context.Context, p *plan.Plan, s plan.Step) (next plan.Step, ok bool, err error)
	// Abandoned says why a running plan cannot go on at all (the cluster
	// ended it), or "".
	Abandoned(ctx context.Context, r *Record) (string, error)
	// Cancel undoes what must not outlive a cancelled plan (a drain's
	// record, say); steps already done stay done.
	Cancel(ctx context.Context, p *plan.Plan) error
}

// Executor advances records.
type Executor struct {
	Act Actuator
	Now func() time.Time
	// StallAfter: no step changed for this long gives a stalled event.
	StallAfter time.Duration
	// Lag reads the lag a plan's budget bounds; nil: budgets bound
	// nothing.
	Lag LagFunc
}

// Advance moves a record as far as it can go now and returns the events
// that happened; the caller persists the record if there are any.
func (x *Executor) Advance(ctx context.Context, r *Record, req Request) ([]Event, error) {
	if r.State.Terminal() {
		return nil, nil
	}
	now := x.Now()
	var evs []Event
	add := func(ev Event) { evs = append(evs, ev) }
	defer func() {
		if len(evs) > 0 {
			r.UpdatedAt = now
		}
	}()

	switch {
	case req == RequestCancel:
		if err := x.Act.Cancel(ctx, &r.Plan); err != nil {
			return evs, err
		}
		for i := range r.Steps {
			if s := r.Steps[i].State; s == StepPending || s == StepRunning {
				ev, err := r.setStep(i, StepCancelled, "", now)
				if err != nil {
					return evs, err
				}
				add(ev)
			}
		}
		add(r.finish(Cancelled, "cancelled by request; steps already done stay done", now))
		return evs, nil
	case req == RequestPause && r.State == Running:
		r.State = Paused
		add(r.emit(now, Event{Type: EventPaused, Message: "paused by request: running steps finish, no new step begins"}, true))
	case req == RequestResume && r.State == Paused:
		r.State = Running
		add(r.emit(now, Event{Type: EventResumed, Message: "resumed by request"}, true))
	}

	if why, err := x.Act.Abandoned(ctx, r); err != nil {
		return evs, err
	} else if why != "" {
		for i := range r.Steps {
			if s := r.Steps[i].State; s == StepPending || s == StepRunning {
				ev, err := r.setStep(i, StepSkipped, why, now)
				if err != nil {
					return evs, err
				}
				add(ev)
			}
		}
		add(r.finish(Failed, why, now))
		return evs, nil
	}

	for {
		cur := r.CurrentBatch()
		if cur == len(r.Plan.Batches) {
			add(r.finish(Done, r.doneMessage(), now))
			return evs, nil
		}
		progressed := false
		var waiting []string
		// Whether steps may begin is asked once, when one could: the
		// lag budget holds a plan before its next step, never a step
		// already running.
		gated, may := false, false
		running := 0
		for _, s := range r.Steps {
			if s.Batch == cur && s.State == StepRunning {
				running++
			}
		}
		for i := range r.Steps {
			s := r.Steps[i]
			if s.Batch != cur || (s.State != StepPending && s.State != StepRunning) {
				continue
			}
			step := r.Step(s)
			out, err := x.Act.Check(ctx, &r.Plan, step, s.State, s.Since)
			if err != nil {
				return evs, err
			}
			switch {
			case out.Failed != "":
				ev, err := r.setStep(i, StepFailed, out.Failed, now)
				if err != nil {
					return evs, err
				}
				add(ev)
				add(r.finish(Failed, fmt.Sprintf("%s: %s", plan.StepText(step), out.Failed), now))
				return evs, nil
			case out.Skipped != "":
				ev, err := r.setStep(i, StepSkipped, out.Skipped, now)
				if err != nil {
					return evs, err
				}
				add(ev)
				progressed = true
			case out.Done:
				ev, err := r.setStep(i, StepDone, out.Note, now)
				if err != nil {
					return evs, err
				}
				add(ev)
				progressed = true
			case out.Impossible != "":
				next, ok, err := x.Act.Replan(ctx, &r.Plan, step)
				if err != nil {
					return evs, err
				}
				if !ok {
					waiting = append(waiting, plan.StepText(step)+": "+out.Impossible)
					continue
				}
				r.Plan.Batches[s.Batch].Steps[s.Index] = next
				if s.State == StepRunning {
					ev, err := r.setStep(i, StepPending, "replanned", now)
					if err != nil {
						return evs, err
					}
					add(ev)
				}
				add(r.emit(now, Event{Type: EventReplanned, Batch: s.Batch, Index: s.Index, Step: &next,
					Message: fmt.Sprintf("%s (%s); now: %s", plan.StepText(step), out.Impossible, plan.StepText(next))}, true))
				progressed = true
			case out.Waiting != "":
				waiting = append(waiting, plan.StepText(step)+": "+out.Waiting)
			case s.State == StepPending && r.State == Running:
				if !gated {
					gated = true
					var failed bool
					if may, failed, err = x.gate(ctx, r, now, add); err != nil || failed {
						return evs, err
					}
				}
				if !may || r.Width > 0 && running >= r.Width {
					continue
				}
				running++
				if err := x.Act.Begin(ctx, &r.Plan, step); err != nil {
					var skip *SkipError
					if errors.As(err, &skip) {
						// What the step acts on went away between its
						// check and its start: as a check finding it.
						running--
						ev, serr := r.setStep(i, StepSkipped, skip.Why, now)
						if serr != nil {
							return evs, serr
						}
						add(ev)
						progressed = true
						continue
					}
					ev, serr := r.setStep(i, StepFailed, err.Error(), now)
					if serr != nil {
						return evs, serr
					}
					add(ev)
					add(r.finish(Failed, fmt.Sprintf("%s failed: %v", plan.StepText(step), err), now))
					return evs, nil
				}
				ev, err := r.setStep(i, StepRunning, "", now)
				if err != nil {
					return evs, err
				}
				add(ev)
			}
		}
		if !progressed || r.CurrentBatch() == cur {
			if r.Held != nil {
				waiting = append(waiting, fmt.Sprintf("held by the lag budget (changefeed %s lags %s)", r.Held.Changefeed, r.Held.Lag.Round(time.Millisecond)))
			}
			x.stall(r, now, waiting, add)
			return evs, nil
		}
		// The batch finished: the next one may begin at once.
		r.widen(cur)
	}
}

// stall reports, once per stretch without progress, what is stuck.
func (x *Executor) stall(r *Record, now time.Time, waiting []string, add func(Event)) {
	if x.StallAfter <= 0 || r.State != Running || now.Sub(r.ProgressAt) < x.StallAfter {
		return
	}
	if r.StalledAt != nil && now.Sub(*r.StalledAt) < x.StallAfter {
		return
	}
	stuck := waiting
	for _, s := range r.Steps {
		if s.State == StepRunning && len(stuck) < 5 {
			stuck = append(stuck, plan.StepText(r.Step(s))+" (running for "+now.Sub(s.Since).Round(time.Second).String()+")")
		}
	}
	r.StalledAt = &now
	add(r.emit(now, Event{Type: EventStalled, Message: fmt.Sprintf("no progress for %s: %s", now.Sub(r.ProgressAt).Round(time.Second), strings.Join(stuck, "; "))}, true))
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
