package api

import (
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
}

// PlanOf shows a record and the request pending on it.
func PlanOf(rec *exec.Record, req exec.Request) *PlanResponse {
	return &PlanResponse{Version: SchemaVersion, ID: rec.ID, Plan: rec.Plan, State: rec.State, Steps: rec.Steps,
		SubmittedBy: rec.SubmittedBy, SubmittedAt: rec.SubmittedAt, UpdatedAt: rec.UpdatedAt, FinishedAt: rec.FinishedAt,
		Message: rec.Message, Seq: rec.Seq, Log: rec.Log, ProgressAt: rec.ProgressAt, StalledAt: rec.StalledAt, Request: req}
}

// Record is the plan as the engine's record, for what renders and
// follows records (exec.Stream, the TUI).
func (p *PlanResponse) Record() *exec.Record {
	return &exec.Record{Version: 1, ID: p.ID, Plan: p.Plan, State: p.State, Steps: p.Steps, SubmittedBy: p.SubmittedBy,
		SubmittedAt: p.SubmittedAt, UpdatedAt: p.UpdatedAt, FinishedAt: p.FinishedAt, Message: p.Message, Seq: p.Seq, Log: p.Log,
		ProgressAt: p.ProgressAt, StalledAt: p.StalledAt}
}
