package coordinator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The plan records a state holds are read through exec.Plans: each with
// the revision a save must name; a missing one is not an error; one that
// does not decode is named and leaves the others readable.
func TestPlansAreReadWithTheirRevisions(t *testing.T) {
	ctx := context.Background()
	rec := exec.New("drain-capture-2-1", &plan.Plan{Kind: plan.KindDrain, Target: "capture-2"}, "test", time.Now().UTC())
	good, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	st := &meta.State{Plans: map[string]meta.RawRecord{
		rec.ID:   {Value: good, Revision: 41},
		"broken": {Value: []byte(`{"id":`), Revision: 42},
	}}
	plans := coordinator.PlansIn(st)
	got, ok, err := plans.Load(ctx, rec.ID)
	if err != nil || !ok || got.ID != rec.ID || got.Revision != 41 || got.Plan.Kind != plan.KindDrain {
		t.Fatalf("load %s: %+v %v %v", rec.ID, got, ok, err)
	}
	if _, ok, err := plans.Load(ctx, "missing"); ok || err != nil {
		t.Fatalf("load of a missing plan: %v %v", ok, err)
	}
	if _, ok, err := plans.Load(ctx, "broken"); ok || err == nil || !strings.Contains(err.Error(), "plan broken") {
		t.Fatalf("load of a record that does not decode: %v %v", ok, err)
	}
	all, err := plans.List(ctx)
	if len(all) != 1 || all[0].ID != rec.ID || err == nil || !strings.Contains(err.Error(), "plan broken") {
		t.Fatalf("list: %+v %v", all, err)
	}
}
