package api

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// DrainRequest is the optional body of PUT /api/v2/captures/{id}/drain.
type DrainRequest struct {
	// Batch is how many maintainers move at once (default 1).
	Batch int `json:"batch,omitempty"`
	// Plan, if given, is the drain plan the operator approved: the
	// coordinator refuses it (409 stale_plan, with the changed objects)
	// if anything it read has changed since it was computed.
	Plan *plan.Plan `json:"plan,omitempty"`
	// SubmittedBy names who submits it, for the plan's audit record.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// Paused submits the plan paused: the capture turns Draining (the
	// drain's first step is always taken at once), and the plan's own
	// steps (maintainer moves, Stopping) wait until it is resumed.
	Paused bool `json:"paused,omitempty"`
	// Budget is the drain plan's lag budget, if any.
	Budget *LagBudget `json:"budget,omitempty"`
}

// DrainCaptureResponse is seed 000's answer to a drain request (202).
type DrainCaptureResponse struct {
	Version int    `json:"version"`
	Target  string `json:"target"`
	Epoch   uint64 `json:"epoch"`
	// PlanID is the plan that runs the drain ('cdcctl plan watch ID').
	PlanID                 string `json:"plan_id"`
	CurrentMaintainerCount int    `json:"current_maintainer_count"`
	CurrentDispatcherCount int    `json:"current_dispatcher_count"`
}

// DrainStatusResponse is seed 000's drain status of one capture.
type DrainStatusResponse struct {
	Version                  int            `json:"version"`
	IsDraining               bool           `json:"is_draining"`
	DrainingCaptureID        string         `json:"draining_capture_id,omitempty"`
	Liveness                 string         `json:"liveness"`
	Epoch                    uint64         `json:"epoch,omitempty"`
	StartedAt                *time.Time     `json:"started_at,omitempty"`
	RemainingMaintainerCount int            `json:"remaining_maintainer_count"`
	RemainingDispatcherCount map[string]int `json:"remaining_dispatcher_count"`
}
