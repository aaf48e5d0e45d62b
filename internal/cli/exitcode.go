package cli

import (
	"context"
	"errors"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Exit codes. docs/exit-codes.md documents them; scripts depend on them,
// so a number never changes meaning.
const (
	ExitOK = 0
	// ExitError: the command failed or the cluster refused it.
	ExitError = 1
	// ExitDryRunChanges: --dry-run found something that would change.
	ExitDryRunChanges = 2
	// ExitTimeout: --timeout ran out while the awaited state was not reached.
	ExitTimeout = 3
	// ExitCancelled: a plan was cancelled before it finished.
	ExitCancelled = 4
	// ExitStalePlan: the cluster refused a plan because what it read changed.
	ExitStalePlan = 5
	// ExitUnreachable: no --server address answered.
	ExitUnreachable = 6
	// ExitBusy: the partition is being moved or split; retry when it is
	// Active again.
	ExitBusy = 7
	// ExitDenied: the agent checks tokens and the request had none, an
	// invalid one, or one whose role may not do this (HTTP 401 or 403).
	ExitDenied = 8
	// ExitHeld: a plan failed because its lag budget held it longer than
	// its --hold-timeout: replication did not catch up.
	ExitHeld = 9
	// ExitBlocked: the pre-checks refused the plan (a blocker, or under
	// --checks=strict a warning); nothing was submitted.
	ExitBlocked = 10
	// ExitHookFailed: a rollout upgrade's hook failed (or outran
	// --exec-timeout) for a capture; the plan is paused.
	ExitHookFailed = 11
	// ExitUsage: bad flags or arguments (sysexits' EX_USAGE).
	ExitUsage = 64
)

// exitError carries an exit code with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withExit(code int, err error) error { return &exitError{code: code, err: err} }

// usageErr marks bad flags or arguments.
func usageErr(err error) error { return withExit(ExitUsage, err) }

// exitCodeOf is the one place where errors become exit codes.
func exitCodeOf(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		return ExitUnreachable
	}
	if api.IsCode(err, api.CodeStalePlan) {
		return ExitStalePlan
	}
	if api.IsCode(err, api.CodeUnauthenticated) || api.IsCode(err, api.CodeForbidden) {
		return ExitDenied
	}
	var busy *plan.BusyError
	if api.IsCode(err, api.CodePartitionBusy) || errors.As(err, &busy) {
		return ExitBusy
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ExitTimeout
	}
	return ExitError
}

// clientErrorCode names errors that did not come from the API, for -o json.
func clientErrorCode(exit int) string {
	switch exit {
	case ExitUnreachable:
		return "unreachable"
	case ExitUsage:
		return "usage"
	case ExitTimeout:
		return "timeout"
	case ExitBusy:
		return "partition_busy"
	case ExitBlocked:
		return "blocked"
	case ExitHookFailed:
		return "hook_failed"
	}
	return "client"
}
