package coordinator

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
)

// PlanStore is exec.Store over etcd for one coordinator term: every save
// is fenced by the term.
type PlanStore struct {
	store *meta.Store
	term  election.Term
}

var _ exec.Store = PlanStore{}

// Save implements exec.Store.
func (s PlanStore) Save(ctx context.Context, rec *exec.Record, revision int64) (int64, error) {
	return s.store.SavePlan(ctx, s.term.Fence, rec.ID, rec, revision)
}

// Plan is one plan's record as st holds it.
func Plan(st *meta.State, id string) (*exec.Record, bool) {
	raw, ok := st.Plans[id]
	if !ok {
		return nil, false
	}
	rec, err := exec.Decode(raw.Value)
	return rec, err == nil
}
