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
	r.Upgrade()
	return &r, nil
}

// Upgrade makes a record an older cdcctl stored read as this one stores
// it, so that an old plan shows as a new one (Decode, as agents read
// records; cdcctl again on what an older agent answers, so that its
// lines agree with each other whichever agent answered; a record read
// so already is left as it is):
//   - a step cancelled before 2026-12-06 was stored skipped, noted
//     "cancelled" ('skipped (cancelled) [1/1 done]'): it is cancelled;
//   - the progress its logged events carry counted skipped (and so those
//     cancelled) steps with done (a watcher that came late to a drain
//     held past its hold timeout read "[8/8 done]" on its last line):
//     they are counted apart.
func (r *Record) Upgrade() {
	var skipped, cancelled []StepStatus
	for i := range r.Steps {
		switch s := &r.Steps[i]; {
		case s.State == StepSkipped && s.Note == "cancelled" && r.State == Cancelled:
			s.State, s.Note = StepCancelled, ""
			cancelled = append(cancelled, *s)
		case s.State == StepSkipped:
			skipped = append(skipped, *s)
		}
	}
	if len(skipped)+len(cancelled) == 0 {
		return // nothing counted wrong: the common case, read on every pass
	}
	for i := range r.Log {
		ev := &r.Log[i]
		if ev.Progress == nil {
			continue
		}
		p := *ev.Progress
		// A step skipped or cancelled stays so: those that were by this
		// event were counted in its done, unless it counted them apart.
		if p.Skipped == 0 {
			p.Done, p.Skipped = apart(p.Done, endedBy(skipped, *ev))
		}
		if p.Cancelled == 0 {
			p.Done, p.Cancelled = apart(p.Done, endedBy(cancelled, *ev))
		}
		ev.Progress = &p
	}
}

// apart takes n steps out of done, where they were counted.
func apart(done, n int) (int, int) {
	if n > done {
		return done, 0 // not counted there: leave it
	}
	return done - n, n
}

// endedBy counts the steps that were in their state at event ev: the
// step's event came before it, or, in a record stored before steps kept
// their event's sequence number, at its time or before.
func endedBy(steps []StepStatus, ev Event) int {
	n := 0
	for _, s := range steps {
		if s.Seq != 0 && s.Seq < ev.Seq || s.Seq == 0 && !s.Since.After(ev.Time) {
			n++
		}
	}
	return n
}
