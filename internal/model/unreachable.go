package model

import "errors"

// ErrUnreachable marks an error reaching a database or a sink (the
// network, or the server down or starting): worth trying again as it
// is, unlike a refusal (a wrong password, a setting to fix). The API
// serves it as 503, not 400, so that a runbook retries it.
var ErrUnreachable = errors.New("cannot be reached")

// Unreachable marks err as ErrUnreachable, its text unchanged.
func Unreachable(err error) error {
	if err == nil {
		return nil
	}
	return unreachable{err}
}

type unreachable struct{ error }

func (u unreachable) Is(target error) bool { return target == ErrUnreachable }
func (u unreachable) Unwrap() error        { return u.error }
