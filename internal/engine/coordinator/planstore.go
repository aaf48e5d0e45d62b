package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// PlansIn reads the plan records a state holds (exec.Plans): the
// coordinator's view of etcd, or the API's.
func PlansIn(st *meta.State) exec.Plans { return statePlans{st} }

type statePlans struct{ st *meta.State }

// Load implements exec.Plans.
func (p statePlans) Load(_ context.Context, id string) (exec.Stored, bool, error) {
	raw, ok := p.st.Plans[id]
	if !ok {
		return exec.Stored{}, false, nil
	}
	rec, err := exec.Decode(raw.Value)
	if err != nil {
		return exec.Stored{}, false, fmt.Errorf("plan %s: %w", id, err)
	}
	return exec.Stored{Record: rec, Revision: raw.Revision}, true, nil
}

// List implements exec.Plans.
func (p statePlans) List(ctx context.Context) ([]exec.Stored, error) {
	out := make([]exec.Stored, 0, len(p.st.Plans))
	var errs []error
	for id := range p.st.Plans {
		s, _, err := p.Load(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// PlanStore is exec.Store over etcd for one coordinator term: it reads
// the state it was given and fences every save by the term.
type PlanStore struct {
	statePlans
	store *meta.Store
	term  election.Term
}

var _ exec.Store = PlanStore{}

// NewPlanStore is the plan store of a coordinator's term over st.
func NewPlanStore(store *meta.Store, term election.Term, st *meta.State) PlanStore {
	return PlanStore{statePlans{st}, store, term}
}

// Save implements exec.Store.
func (s PlanStore) Save(ctx context.Context, rec *exec.Record, revision int64) (int64, error) {
	return s.store.SavePlan(ctx, s.term.Fence, rec.ID, rec, revision)
}

// planRecord is one plan's record as st holds it; false when it is
// missing or does not decode.
func planRecord(st *meta.State, id string) (*exec.Record, bool) {
	s, ok, err := PlansIn(st).Load(context.Background(), id)
	return s.Record, ok && err == nil
}

// Snapshot is what the planner reads of st: its snapshot, and whether the
// drain in progress has a plan still running (a drain whose plan failed is
// taken over by the same drain submitted again).
func Snapshot(st *meta.State) model.Snapshot {
	snap := st.Snapshot()
	if st.Drain != nil {
		if rec, ok := planRecord(st, st.Drain.PlanID); ok && rec.State.Terminal() {
			snap.DrainEnded = true
		}
	} else if snap.Draining != "" {
		// Draining with no drain record: its drain was cancelled (the
		// capture stays Draining until its process restarts). A drain of
		// it again takes it over, as one of a drain whose plan failed.
		snap.DrainEnded = true
	}
	return snap
}
