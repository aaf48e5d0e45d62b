package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The API's plan type is its own, but its JSON is what GET
// /api/v2/plans/{id} has sent since version 1 (the engine's record with
// the API's version and the pending request), byte for byte; and it
// turns back into the record it came from.
func TestAPlanIsShownAsItAlwaysWas(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	p := &plan.Plan{Kind: plan.KindMove, Batches: []plan.Batch{{Steps: []plan.Step{{Kind: plan.StepMovePartition, Partition: "p1", To: "capture-2"}}}}}
	rec := exec.New("move-p1-1", p, "ops", now)
	rec.Message = "under way"
	type before struct {
		Version int `json:"version"`
		exec.Record
		Request exec.Request `json:"request,omitempty"`
	}
	want, err := json.Marshal(before{Version: SchemaVersion, Record: *rec, Request: exec.RequestPause})
	if err != nil {
		t.Fatal(err)
	}
	shown := PlanOf(rec, exec.RequestPause)
	got, err := json.Marshal(shown)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("the plan's JSON changed:\n got %s\nwant %s", got, want)
	}
	// (Fields that came after the request, left out when empty, round
	// trip too.)
	rec.Failing = &exec.Failing{Since: now, Message: "a step failed"}
	shown = PlanOf(rec, exec.RequestPause)
	back, err := json.Marshal(shown.Record())
	if err != nil {
		t.Fatal(err)
	}
	if orig, _ := json.Marshal(rec); string(back) != string(orig) {
		t.Fatalf("the record shown does not turn back into itself:\n got %s\nwant %s", back, orig)
	}
}
