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
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

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
	// WaitForRunning: a plan whose step failed while other steps of it
	// run fails once they have ended (Record.Failing). False, it fails at
	// once, as versions before the wait did: the coordinator sets it
	// while every node knows the wait (model.FeaturePlanFailing), since
	// an older one that took over would begin the failing plan's other
	// steps and never end it.
	WaitForRunning bool
	// HoldOutlivesPlan: a plan's lag budget hold stays after the plan
	// failed held past its hold timeout (a drain's record holds its
	// capture, so nothing more moves off it), so a step still running
	// then may never end: it is skipped, and the plan fails at once.
	HoldOutlivesPlan bool
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
		// A pause holds the plan itself (a drain's record says so); its
		// lag budget is asked afresh once it resumes, so that time
		// paused never counts toward --hold-timeout.
		r.State, r.Held = Paused, nil
		add(r.emit(now, Event{Type: EventPaused, Message: "paused by request: running steps finish, no new step begins"}, true))
	case req == RequestResume && r.State == Paused:
		r.State, r.Held = Running, nil // (a record an older coordinator paused held)
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

	if r.Failing == nil {
		// A step failed and the plan goes on: an older coordinator saved
		// the record without what it fails with. It fails. (Once, here: a
		// step failing below returns at once.)
		if i := slices.IndexFunc(r.Steps, func(s StepStatus) bool { return s.State == StepFailed }); i >= 0 {
			s := r.Steps[i]
			if ev, _ := x.fail(r, plan.StepText(r.Step(s))+": "+s.Note, now); ev.Type != "" {
				add(ev)
			}
			if r.State.Terminal() {
				return evs, nil
			}
		}
	}
	for {
		cur := r.CurrentBatch()
		if r.Failing != nil && (r.Counts()[StepRunning] == 0 || !x.WaitForRunning) {
			// Nothing runs any more; or a node that would not know the
			// wait joined since it began.
			add(r.finish(Failed, r.Failing.Message, now))
			return evs, nil
		}
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
			if s.State == StepPending && r.Failing != nil {
				continue // never to begin: not checked either
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
				if ev, _ := x.fail(r, fmt.Sprintf("%s: %s", plan.StepText(step), out.Failed), now); ev.Type != "" {
					add(ev)
				}
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
			case s.State == StepPending && r.State == Running && r.Failing == nil:
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
					if ev, _ := x.fail(r, fmt.Sprintf("%s failed: %v", plan.StepText(step), err), now); ev.Type != "" {
						add(ev)
					}
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
			if !gated && r.State == Running && r.Failing == nil && (r.Held != nil || x.HoldOutlivesPlan && r.Budget.On()) {
				// No step of this batch asked to begin (what is left of
				// it runs or waits), but the budget is asked all the
				// same: a drain's running steps wait for its hold to
				// end, a drain resumed after a pause is held again over
				// the bound, and a hold's timeout is counted while it
				// holds steps back.
				if x.HoldOutlivesPlan || r.Counts()[StepPending] > 0 {
					if _, failed, err := x.gate(ctx, r, now, add); err != nil || failed {
						return evs, err
					}
				} else {
					add(r.unhold(now, "nothing is left to begin: the lag budget holds no step back"))
				}
			}
			if ev, ok := r.failNow(now); ok {
				add(ev)
				return evs, nil
			}
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
