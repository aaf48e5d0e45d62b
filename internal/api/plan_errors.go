package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// PlanError turns the planner's refusals into the API's errors, the one
// mapping for the server and for the CLI (which plans locally first):
// a stale plan is 409 stale_plan with the changed objects; a busy
// partition is 409 partition_busy with a retry time; seed 000's and seed
// 003's rules are 400, 404 or 409.
func PlanError(err error) (*Error, bool) {
	var stale *plan.StaleError
	if errors.As(err, &stale) {
		e := &Error{Code: CodeStalePlan, Message: stale.Error(),
			Hint: "compute the plan again (run the command again, or --dry-run to review it)"}
		for _, c := range stale.Changes {
			e.Changed = append(e.Changed, c.String())
		}
		return e, true
	}
	var busy *plan.BusyError
	if errors.As(err, &busy) {
		msg := busy.Error()
		if !busy.Since.IsZero() {
			msg += fmt.Sprintf(" (for %s)", time.Since(busy.Since).Round(100*time.Millisecond))
		}
		return &Error{Code: CodePartitionBusy, Message: msg, RetryAfterSeconds: 1,
			Hint: "retry when it is Active again ('cdcctl partition get " + busy.Partition + "')"}, true
	}
	var r *plan.Refusal
	if errors.As(err, &r) {
		code := CodeBadRequest
		switch r.Reason {
		case plan.RefuseNotFound:
			code = CodeNotFound
		case plan.RefuseInProgress:
			code = CodeConflict
		}
		return &Error{Code: code, Message: r.Message, Hint: r.Hint}, true
	}
	return nil, false
}
