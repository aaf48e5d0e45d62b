// Package api is the HTTP API of cdc-agent: handlers over a Backend
// interface, the typed client the CLI uses, the JSON shapes (each with a
// version), and the single error model with its HTTP statuses.
//
// It imports model, plan, exec and redact; it must never import the
// engine, agent or cli.
package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/cdcctl/cdcctl/internal/redact"
)

// Code names a class of error. Clients branch on it, never on messages.
type Code string

const (
	CodeBadRequest Code = "bad_request"
	CodeMethod     Code = "method_not_allowed"
	CodeNotFound   Code = "not_found"
	// CodeTooLarge: the request body is over the API's limit.
	CodeTooLarge Code = "too_large"
	CodeConflict Code = "conflict"
	// CodeStalePlan: a submitted plan read objects that changed since;
	// Changed lists them. Compute the plan again.
	CodeStalePlan Code = "stale_plan"
	// CodePartitionBusy: the partition is being moved or split (seed
	// 003's ErrPartitionBusy); retry after RetryAfterSeconds.
	CodePartitionBusy Code = "partition_busy"
	CodeNoCoordinator Code = "no_coordinator"
	// CodeNotCoordinator: a forwarded write reached a node that is no
	// longer the coordinator; the forwarder looks again and retries.
	CodeNotCoordinator Code = "not_coordinator"
	CodeUnavailable    Code = "unavailable"
	CodeInternal       Code = "internal"
	// CodeUnauthenticated: no valid bearer token (the agent checks
	// tokens); CodeForbidden: the token's role may not do this.
	CodeUnauthenticated Code = "unauthenticated"
	CodeForbidden       Code = "forbidden"
	// CodeHeadersTooLarge: the request's headers are over the API's
	// limit (MaxHeaderBytes).
	CodeHeadersTooLarge Code = "headers_too_large"
)

// statusOf is the one place where error codes meet HTTP statuses.
func statusOf(c Code) int {
	switch c {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeMethod:
		return http.StatusMethodNotAllowed
	case CodeNotFound:
		return http.StatusNotFound
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeConflict, CodeStalePlan, CodePartitionBusy:
		return http.StatusConflict
	case CodeNoCoordinator, CodeNotCoordinator, CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeHeadersTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// codeOfStatus recovers a code from a status when a response had no JSON
// error body (a proxy in between, say).
func codeOfStatus(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return CodeBadRequest
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusConflict:
		return CodeConflict
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusRequestHeaderFieldsTooLarge:
		return CodeHeadersTooLarge
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	}
	return CodeInternal
}

// Error is the body of every failed request:
// {"code": "...", "message": "...", "hint": "..."}.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Hint says what to do about it.
	Hint string `json:"hint,omitempty"`
	// Changed: with stale_plan, the objects that changed.
	Changed []string `json:"changed,omitempty"`
	// RetryAfterSeconds: with partition_busy, when to try again (also
	// the Retry-After header).
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + "; " + e.Hint
}

// Status is the HTTP status this error is served with.
func (e *Error) Status() int { return statusOf(e.Code) }

// Errorf builds an error with a code, a hint and a formatted message.
func Errorf(code Code, hint, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// AsError turns any error into an *Error; unknown errors are internal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal server error: " + err.Error(), Hint: "see the agent's log for details"}
}

// Redacted is a copy of e with the secrets of every URI, DSN and
// name=value pair in its texts masked (redact.Text).
func Redacted(e *Error) *Error {
	c := *e
	c.Message, c.Hint = redact.Text(e.Message), redact.Text(e.Hint)
	if len(e.Changed) > 0 {
		c.Changed = make([]string, len(e.Changed))
		for i, s := range e.Changed {
			c.Changed[i] = redact.Text(s)
		}
	}
	return &c
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, c Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == c
}
