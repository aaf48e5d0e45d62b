package coordinator

import (
	"errors"
	"fmt"
)

// refusal is a request the coordinator refuses: one of its kinds
// (ErrInvalid, ErrNotPaused, ErrCleanupPending, meta's not-found and
// exists) with what the operator reads. The API answers the kind's
// status and the detail alone.
type refusal struct {
	kind   error
	detail string
}

func (r *refusal) Error() string        { return r.kind.Error() + ": " + r.detail }
func (r *refusal) Is(target error) bool { return target == r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, detail: fmt.Sprintf(format, args...)}
}

// Detail is what a refusal says beyond its kind; any other error's text.
func Detail(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.detail
	}
	return err.Error()
}
