package exec

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// Budget bounds what a running plan may do to replication: while the
// checkpoint lag of a changefeed the plan touches is over MaxLag, no step
// of it begins (steps already running finish); it goes on by itself once
// the lag is below ResumeBelow, and fails if held longer than
// HoldTimeout. A zero MaxLag is no budget.
type Budget struct {
	MaxLag time.Duration `json:"max_lag,omitempty"`
	// ResumeBelow is the hysteresis: half of MaxLag when zero.
	ResumeBelow time.Duration `json:"resume_below,omitempty"`
	// HoldTimeout: 0 holds for as long as it takes.
	HoldTimeout time.Duration `json:"hold_timeout,omitempty"`
}

// On says whether the budget bounds anything.
func (b Budget) On() bool { return b.MaxLag > 0 }

// Resume is the lag below which a held plan goes on.
func (b Budget) Resume() time.Duration {
	if b.ResumeBelow > 0 {
		return b.ResumeBelow
	}
	return b.MaxLag / 2
}

// Check says what is wrong with a budget, in the flags' words.
func (b Budget) Check() error {
	switch {
	case b.MaxLag < 0 || b.ResumeBelow < 0 || b.HoldTimeout < 0:
		return fmt.Errorf("--max-lag, --resume-below and --hold-timeout are durations of 0 or more")
	case !b.On() && (b.ResumeBelow > 0 || b.HoldTimeout > 0):
		return fmt.Errorf("--resume-below and --hold-timeout bound a lag budget: give --max-lag too")
	case b.ResumeBelow >= b.MaxLag && b.On():
		return fmt.Errorf("--resume-below %s must be below --max-lag %s (a plan held over the bound goes on below it)", b.ResumeBelow, b.MaxLag)
	}
	return nil
}

func (b Budget) String() string {
	if !b.On() {
		return "none"
	}
	s := fmt.Sprintf("max lag %s, going on below %s", b.MaxLag, b.Resume())
	if b.HoldTimeout > 0 {
		s += fmt.Sprintf(", failing when held over %s", b.HoldTimeout)
	}
	return s
}

// Hold is a plan held by its budget.
type Hold struct {
	Since      time.Time     `json:"since"`
	Changefeed string        `json:"changefeed"`
	Lag        time.Duration `json:"lag"`
}

// LagFunc reads the worst checkpoint lag among the changefeeds a plan
// touches, and names that changefeed.
type LagFunc func(ctx context.Context, p *plan.Plan) (changefeed string, lag time.Duration, err error)

// HoldTimeoutPrefix begins the message of a plan failed for being held
// longer than its budget's hold timeout (cdcctl's exit code 9).
const HoldTimeoutPrefix = "held by its lag budget for longer than "

// gate says whether the plan may begin steps now, under its budget:
// held while a changefeed lags over the bound, going on below the
// resume bound, failed when held past the timeout (failed true). A hold
// halves how many steps may run at once (Width).
func (x *Executor) gate(ctx context.Context, r *Record, now time.Time, add func(Event)) (may, failed bool, err error) {
	b := r.Budget
	if !b.On() || x.Lag == nil {
		r.Held = nil
		return true, false, nil
	}
	cf, lag, err := x.Lag(ctx, &r.Plan)
	if err != nil {
		return false, false, err
	}
	if r.Held == nil {
		if lag <= b.MaxLag {
			return true, false, nil
		}
		r.Held = &Hold{Since: now, Changefeed: cf, Lag: lag}
		batch := r.CurrentBatch()
		if batch < len(r.Plan.Batches) {
			if r.Width == 0 {
				r.Width = len(r.Plan.Batches[batch].Steps)
			}
			r.Width = max(1, r.Width/2)
			r.HeldBatch = batch + 1
		}
		add(r.emit(now, Event{Type: EventHeld, Message: fmt.Sprintf("changefeed %s lags %s, over --max-lag %s; running steps finish, no step begins until it lags less than %s (then %s)",
			cf, lag.Round(time.Millisecond), b.MaxLag, b.Resume(), atOnce(r.Width))}, true))
		return false, false, nil
	}
	if lag < b.Resume() {
		add(r.unhold(now, fmt.Sprintf("changefeed %s lags %s, below %s: going on", cf, lag.Round(time.Millisecond), b.Resume())))
		return true, false, nil
	}
	r.Held.Changefeed, r.Held.Lag = cf, lag
	if b.HoldTimeout > 0 && now.Sub(r.Held.Since) > b.HoldTimeout {
		over := fmt.Sprintf("over --max-lag %s", b.MaxLag)
		if lag <= b.MaxLag {
			over = fmt.Sprintf("not yet below %s (--resume-below)", b.Resume())
		}
		msg := fmt.Sprintf("%s%s (--hold-timeout): changefeed %s lags %s, %s; the steps done stay done, the others were not begun or not finished; submit the plan again when replication has caught up",
			HoldTimeoutPrefix, b.HoldTimeout, cf, lag.Round(time.Millisecond), over)
		for i := range r.Steps {
			note := ""
			switch s := r.Steps[i]; {
			case s.State == StepPending:
				note = "held past --hold-timeout"
			case s.State == StepRunning && x.HoldOutlivesPlan:
				// The hold stays with the failed plan (a drain's record
				// holds its capture), so a step running now may never end
				// under it (a drain's partitions of a changefeed, of which
				// no more move): what it began finishes in the engine, and
				// the step, not done, says so. Unless it is done already.
				out, err := x.Act.Check(ctx, &r.Plan, r.Step(s), s.State, s.Since)
				if err != nil {
					return false, false, err
				}
				if out.Done {
					ev, err := r.setStep(i, StepDone, out.Note, now)
					if err != nil {
						return false, false, err
					}
					add(ev)
					continue
				}
				note = "running when the plan was held past --hold-timeout: what it began finishes, the rest is not done"
			default:
				continue
			}
			ev, err := r.setStep(i, StepSkipped, note, now)
			if err != nil {
				return false, false, err
			}
			add(ev)
		}
		// Elsewhere a running step ends by itself (a move, a split): the
		// plan fails once it has (Executor.fail).
		ev, failed := x.fail(r, msg, now)
		if ev.Type != "" {
			add(ev)
		}
		return false, failed, nil
	}
	return false, false, nil
}

// unhold ends a plan's hold, saying why and for how long it held.
func (r *Record) unhold(now time.Time, why string) Event {
	held := now.Sub(r.Held.Since)
	r.Held = nil
	return r.emit(now, Event{Type: EventUnheld, Message: fmt.Sprintf("%s (held %s)", why, held.Round(time.Second))}, true)
}

// widen grows how many steps may run at once by one after a batch that
// ran without a hold (Cruise Control's adjuster: halved on a breach,
// grown back slowly); the batch size is the ceiling.
func (r *Record) widen(finished int) {
	if r.Width == 0 || r.HeldBatch == finished+1 || finished+1 >= len(r.Plan.Batches) {
		return
	}
	r.Width++
	if r.Width >= len(r.Plan.Batches[finished+1].Steps) && r.Width >= r.Plan.BatchSize {
		r.Width = 0
	}
}

// SetBudget changes a plan's budget (cdcctl plan set), effective at its
// next advance.
func (r *Record) SetBudget(b Budget, by string, now time.Time) Event {
	old := r.Budget
	r.Budget = b
	if !b.On() {
		r.Held = nil
	}
	r.UpdatedAt = now
	return r.emit(now, Event{Type: EventBudget, Message: fmt.Sprintf("lag budget changed by %s: %s (was %s)", nonEmpty(by, "unknown"), b, old)}, true)
}

func atOnce(width int) string {
	if width == 1 {
		return "one step at a time"
	}
	return fmt.Sprintf("at most %d steps at once", width)
}
