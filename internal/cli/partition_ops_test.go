package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A dry run's busy check reads the plans not over, then each: a plan that
// finished and was removed in between is no longer busy, and the check
// goes on to the others. It used to end the dry run with the 404.
func TestTheBusyCheckPassesOverAPlanThatVanished(t *testing.T) {
	split := func(p string) *plan.Plan {
		return &plan.Plan{Version: 1, Kind: "split", Target: model.NodeID(p), Batches: []plan.Batch{
			{Steps: []plan.Step{{Kind: plan.StepSplitPartition, Changefeed: "demo", Partition: p, Key: "m"}}},
		}}
	}
	holding := exec.New("split-p7-2", split("p7"), "ops", time.Unix(1000, 0))
	holding.Hold(time.Unix(1000, 0))
	pending := map[exec.StepState]int{exec.StepPending: 1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v2/plans":
			answer(w, api.PlanList{Version: api.SchemaVersion, Plans: []api.PlanSummary{
				{ID: "split-p3-1", Kind: "split", State: exec.Running, Steps: pending},
				{ID: holding.ID, Kind: "split", State: exec.Paused, Steps: pending},
			}})
		case "/api/v2/plans/" + holding.ID:
			answer(w, api.PlanOf(holding, exec.RequestNone))
		default: // split-p3-1 finished and was removed after the list
			api.WriteError(w, api.Errorf(api.CodeNotFound, "list the plans with 'cdcctl plan list'", "plan %q not found", strings.TrimPrefix(r.URL.Path, "/api/v2/plans/")))
		}
	}))
	defer srv.Close()
	c, err := api.NewClient([]string{srv.URL}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := busyInPlans(context.Background(), c, split("p3")); err != nil {
		t.Fatalf("p3's plan vanished, yet: %v", err)
	}
	err = busyInPlans(context.Background(), c, split("p7"))
	if exitCodeOf(err) != ExitBusy || !strings.Contains(err.Error(), "partition p7 is busy: plan split-p7-2 (paused)") {
		t.Fatalf("p7, held by a paused plan listed after the one that vanished: exit %d, %v", exitCodeOf(err), err)
	}
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
