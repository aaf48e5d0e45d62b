package coordinator

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A changefeed created again under the name of the one a plan read has
// partitions of the same names, but not the ones the plan meant to move:
// its steps are skipped, not carried out on the new changefeed. (In a
// cluster the executor meets the removal first, since a create takes
// longer than its tick; the create revision is what tells the two apart
// when it does not.)
func TestAStepOfAChangefeedCreatedAgainSinceThePlanIsSkipped(t *testing.T) {
	p := &plan.Plan{Fingerprint: plan.Fingerprint{Revision: 100}}
	s := plan.Step{Kind: plan.StepMovePartition, Changefeed: "cf", Partition: "p1"}
	st := func(created int64) *meta.State {
		return &meta.State{Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{"cf": {InfoCreated: created, InfoRevision: 300}}}
	}
	for _, tc := range []struct {
		st   *meta.State
		want string
	}{
		{st(40), ""}, // created before the plan, updated since: the same one
		{st(100), ""},
		{st(250), "changefeed cf was removed and created again since the plan was computed; compute a plan for the new one if it needs one"},
		{&meta.State{}, "changefeed cf was removed"},
	} {
		if got := removed(tc.st, p, s); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.st.Changefeeds["cf"], got, tc.want)
		}
	}
	// A plan without a revision (none read) skips only on a removal.
	if got := removed(st(250), &plan.Plan{}, s); got != "" {
		t.Errorf("a plan without a fingerprint revision: %q", got)
	}
}
