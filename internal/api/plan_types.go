package api

import (
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

// PlanResponse is GET /api/v2/plans/{id}: the whole record.
type PlanResponse struct {
	Version int `json:"version"`
	exec.Record
	// Request is an operator's pending request (pause, resume, cancel).
	Request exec.Request `json:"request,omitempty"`
}
