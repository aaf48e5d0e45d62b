package plan

// RefusalReason classifies why a plan cannot be made; the API maps each
// to an HTTP status, the CLI to an exit code.
type RefusalReason string

const (
	RefuseNotFound      RefusalReason = "not_found"      // 404
	RefuseInvalid       RefusalReason = "invalid"        // 400
	RefuseInProgress    RefusalReason = "in_progress"    // 409
	RefuseNoDestination RefusalReason = "no_destination" // 400: nowhere to put the work
)

// Refusal is a plan that cannot be made, with what to do instead.
type Refusal struct {
	Reason  RefusalReason
	Message string
	Hint    string
}

func (r *Refusal) Error() string { return r.Message + "; " + r.Hint }
