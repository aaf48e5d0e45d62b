package api

import (
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// SubmitPlanRequest is POST /api/v2/plans: a plan exactly as computed
// (with its fingerprint). It is refused with 409 stale_plan, naming the
// changed objects, if anything it read has changed since.
type SubmitPlanRequest struct {
	Plan        *plan.Plan `json:"plan"`
	SubmittedBy string     `json:"submitted_by,omitempty"`
	// Paused submits the plan paused: no step begins until it is resumed.
	Paused bool `json:"paused,omitempty"`
	// Budget is the plan's lag budget, if any.
	Budget *LagBudget `json:"budget,omitempty"`
}

// LagBudget is a plan's lag budget: while the checkpoint lag of a
// changefeed the plan acts on is over MaxLag, no step of it begins (the
// running ones finish); it goes on below ResumeBelow (half of MaxLag by
// default) and fails when held longer than HoldTimeout (0: no limit).
// Durations as Go writes them: "5s", "1m30s".
type LagBudget struct {
	MaxLag      string `json:"max_lag"`
	ResumeBelow string `json:"resume_below,omitempty"`
	HoldTimeout string `json:"hold_timeout,omitempty"`
}

// Budget reads a lag budget; nil is none. Errors say which field.
func (b *LagBudget) Budget() (exec.Budget, error) {
	var out exec.Budget
	if b == nil {
		return out, nil
	}
	for _, f := range []struct {
		name, text string
		to         *time.Duration
	}{{"max_lag", b.MaxLag, &out.MaxLag}, {"resume_below", b.ResumeBelow, &out.ResumeBelow}, {"hold_timeout", b.HoldTimeout, &out.HoldTimeout}} {
		if f.text == "" {
			continue
		}
		d, err := time.ParseDuration(f.text)
		if err != nil {
			return out, fmt.Errorf("budget.%s %q is not a duration (write it as 5s, 1m30s)", f.name, f.text)
		}
		*f.to = d
	}
	return out, out.Check()
}

// LagBudgetOf writes a budget for the API; nil when there is none.
func LagBudgetOf(b exec.Budget) *LagBudget {
	if !b.On() {
		return nil
	}
	out := &LagBudget{MaxLag: b.MaxLag.String(), ResumeBelow: b.Resume().String()}
	if b.HoldTimeout > 0 {
		out.HoldTimeout = b.HoldTimeout.String()
	}
	return out
}

// PlanHold is a plan held by its lag budget.
type PlanHold struct {
	Since      time.Time `json:"since"`
	Changefeed string    `json:"changefeed"`
	Lag        string    `json:"lag"`
}

// PlanList is GET /api/v2/plans: every stored plan, newest first, with
// its steps' states counted.
type PlanList struct {
	Version int           `json:"version"`
	Plans   []PlanSummary `json:"plans"`
}

// PlanSummary is one plan in a list.
type PlanSummary struct {
	ID          string                 `json:"id"`
	Kind        plan.Kind              `json:"kind"`
	Target      string                 `json:"target,omitempty"`
	State       exec.State             `json:"state"`
	Steps       map[exec.StepState]int `json:"steps"`
	SubmittedBy string                 `json:"submitted_by,omitempty"`
	SubmittedAt string                 `json:"submitted_at"`
	Message     string                 `json:"message,omitempty"`
}

// PlanResponse is GET /api/v2/plans/{id}: a plan's whole record, in the
// API's own type, so a change to the engine's record (exec.Record) is
// not a change to the API; the fields are the record's as they have been
// shown since version 1.
type PlanResponse struct {
	Version     int               `json:"version"`
	ID          string            `json:"id"`
	Plan        plan.Plan         `json:"plan"`
	State       exec.State        `json:"state"`
	Steps       []exec.StepStatus `json:"steps"`
	SubmittedBy string            `json:"submitted_by,omitempty"`
	SubmittedAt time.Time         `json:"submitted_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	Message     string            `json:"message,omitempty"`
	// Seq is the sequence number of the plan's last event.
	Seq uint64 `json:"seq"`
	// Log keeps the last notable events, for late watchers.
	Log []exec.Event `json:"log,omitempty"`
	// ProgressAt: when a step last changed state; StalledAt: when a
	// stall was last reported.
	ProgressAt time.Time  `json:"progress_at"`
	StalledAt  *time.Time `json:"stalled_at,omitempty"`
	// Request is an operator's pending request (pause, resume, cancel).
	Request exec.Request `json:"request,omitempty"`
	// Budget is the plan's lag budget; Held, while it holds the plan;
	// Width, how many steps of a batch may run at once since a hold
	// halved it (absent: the whole batch).
	Budget *LagBudget `json:"budget,omitempty"`
	Held   *PlanHold  `json:"held,omitempty"`
	Width  int        `json:"width,omitempty"`
	// Failing is the failure the plan ends with once its steps still
	// running have ended.
	Failing *exec.Failing `json:"failing,omitempty"`
}

// PlanOf shows a record and the request pending on it.
func PlanOf(rec *exec.Record, req exec.Request) *PlanResponse {
	out := &PlanResponse{Version: SchemaVersion, ID: rec.ID, Plan: rec.Plan, State: rec.State, Steps: rec.Steps,
		SubmittedBy: rec.SubmittedBy, SubmittedAt: rec.SubmittedAt, UpdatedAt: rec.UpdatedAt, FinishedAt: rec.FinishedAt,
		Message: rec.Message, Seq: rec.Seq, Log: rec.Log, ProgressAt: rec.ProgressAt, StalledAt: rec.StalledAt, Request: req,
		Budget: LagBudgetOf(rec.Budget), Width: rec.Width, Failing: rec.Failing}
	if h := rec.Held; h != nil {
		out.Held = &PlanHold{Since: h.Since, Changefeed: h.Changefeed, Lag: h.Lag.Round(time.Millisecond).String()}
	}
	return out
}

// Record is the plan as the engine's record, for what renders and
// follows records (exec.Stream, the TUI).
func (p *PlanResponse) Record() *exec.Record {
	rec := &exec.Record{Version: 1, ID: p.ID, Plan: p.Plan, State: p.State, Steps: p.Steps, SubmittedBy: p.SubmittedBy,
		SubmittedAt: p.SubmittedAt, UpdatedAt: p.UpdatedAt, FinishedAt: p.FinishedAt, Message: p.Message, Seq: p.Seq, Log: p.Log,
		ProgressAt: p.ProgressAt, StalledAt: p.StalledAt, Width: p.Width, Failing: p.Failing}
	if b, err := p.Budget.Budget(); err == nil {
		rec.Budget = b
	}
	// An older agent answers its records as stored: counted the old way.
	rec.Upgrade()
	if h := p.Held; h != nil {
		lag, _ := time.ParseDuration(h.Lag)
		rec.Held = &exec.Hold{Since: h.Since, Changefeed: h.Changefeed, Lag: lag}
	}
	return rec
}
