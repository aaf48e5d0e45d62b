package coordinator

import (
	"errors"
	"fmt"
	"net"

	"github.com/cdcctl/cdcctl/internal/model"
)

// refusal is a request the coordinator refuses: one of its kinds
// (ErrInvalid, ErrUnavailable, ErrNotPaused, ErrCleanupPending, meta's not-found and
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

// ErrUnavailable marks a request refused because a database or a sink it
// needs could not be reached: worth trying again as it is, unlike
// ErrInvalid.
var ErrUnavailable = errors.New("unavailable")

// refuseReaching refuses a request over err, met asking a source or a
// sink: unavailable when it could not be reached, else invalid.
func refuseReaching(err error) error {
	// Sources and sinks mark what is worth a retry; beyond that, only a
	// dial that failed (a sink that did not say) is, not any error whose
	// words look like one.
	var op *net.OpError
	if errors.Is(err, model.ErrUnreachable) || errors.As(err, &op) && op.Op == "dial" && model.DialFailed(op) {
		return refuse(ErrUnavailable, "%v", err)
	}
	return refuse(ErrInvalid, "%v", err)
}
