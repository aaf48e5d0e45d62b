package api

import (
	"context"
	"net/http"
	"net/url"
)

// SetBudgetRequest is POST /api/v2/plans/{id}/budget: a running plan's
// new lag budget (its max_lag "0s" or empty: none), applied at the
// executor's next pass.
type SetBudgetRequest struct {
	Budget      LagBudget `json:"budget"`
	SubmittedBy string    `json:"submitted_by,omitempty"`
}

func (s *server) setPlanBudget(w http.ResponseWriter, r *http.Request) {
	var req SetBudgetRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	req.SubmittedBy = submitter(r, req.SubmittedBy)
	if _, err := req.Budget.Budget(); err != nil {
		writeError(w, Errorf(CodeBadRequest, `send {"budget": {"max_lag": "5s", "resume_below": "2s", "hold_timeout": "10m"}}`, "%v", err))
		return
	}
	v, err := s.b.SetPlanBudget(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// SetPlanBudget is POST /api/v2/plans/{id}/budget.
func (c *Client) SetPlanBudget(ctx context.Context, id string, req SetBudgetRequest) (*PlanResponse, error) {
	var out PlanResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/plans/"+url.PathEscape(id)+"/budget", req, &out)
}
