package exec

import (
	"context"
	"encoding/json"
	"fmt"
)

// Stored is a plan's record as a store holds it, with the revision it
// was read at: the revision a save of it must name.
type Stored struct {
	*Record
	Revision int64
}

// Plans reads plan records.
type Plans interface {
	// Load reads one plan's record; false when there is none.
	Load(ctx context.Context, id string) (Stored, bool, error)
	// List reads every plan's record, in no order. A record that does
	// not decode is left out and named in the error; the others are
	// returned with it.
	List(ctx context.Context) ([]Stored, error)
}

// Store keeps plan records. The engine's is the coordinator's, over etcd
// (coordinator.PlanStore): a save is fenced by the coordinator's term and
// conditional on the revision the record was read at, so a record is
// never written over by a writer that did not read the latest.
type Store interface {
	Plans
	// Save writes rec over the revision it was read at (0: a new plan,
	// which must not exist) and returns the new revision.
	Save(ctx context.Context, rec *Record, revision int64) (int64, error)
}

// Decode reads a stored record: the one place a plan record's JSON is
// read back. (The agent's metrics read two fields of every plan on each
// pass with types of their own, to skip decoding a large plan's steps.)
func Decode(raw []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("a stored plan record does not decode: %w", err)
	}
	r.upgrade()
	return &r, nil
}

// upgrade makes a record an older cdcctl stored read as this one stores
// it: the progress its logged events carry counted skipped steps with
// done (a watcher that came late to a drain held past its hold timeout
// read "[8/8 done]" on its last line), and now counts them apart.
func (r *Record) upgrade() {
	var skipped []StepStatus
	for _, s := range r.Steps {
		if s.State == StepSkipped {
			skipped = append(skipped, s)
		}
	}
	if len(skipped) == 0 {
		return // nothing counted wrong: the common case, read on every pass
	}
	for i := range r.Log {
		ev := &r.Log[i]
		p := ev.Progress
		if p == nil || p.Skipped > 0 {
			continue // counted apart already
		}
		// A step skipped stays skipped: the ones skipped now that were
		// by this event were counted in its done.
		n := 0
		for _, s := range skipped {
			if endedBy(s, *ev) {
				n++
			}
		}
		if n > 0 && p.Done >= n {
			c := *p
			c.Done, c.Skipped = c.Done-n, n
			ev.Progress = &c
		}
	}
}

// endedBy tells whether step s was in its state at event ev: the step's
// event came before it, or, in a record stored before steps kept their
// event's sequence number, at its time or before.
func endedBy(s StepStatus, ev Event) bool {
	if s.Seq != 0 {
		return s.Seq < ev.Seq
	}
	return !s.Since.After(ev.Time)
}
