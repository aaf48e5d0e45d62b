package coordinator

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A maintainer-failed incident moves the maintainer only if it speaks of
// its current placement, and keeps that capture out for
// MaintainerExclusion, whatever the placement since.
func TestAMaintainerFailureNamesItsPlacementAndExcludesForAWhile(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	failed := model.Incident{Time: now.Add(-time.Minute), Kind: model.IncidentMaintainerFailed, Node: "capture-2", Epoch: 3, Err: "unreachable"}
	e := &meta.ChangefeedEntry{
		Maintainer: model.MaintainerPlacement{Node: "capture-2", Epoch: 3},
		Status:     model.ChangefeedStatus{Incidents: []model.Incident{{Kind: "recovered", Node: "capture-2"}, failed}},
	}
	if in := failedHere(e, now); in == nil || in.Err != "unreachable" {
		t.Fatalf("failedHere = %+v; want the incident of placement 3 on capture-2", in)
	}
	if !maintainerExcluded(e, "capture-2", now) || maintainerExcluded(e, "capture-1", now) {
		t.Fatal("only capture-2 is excluded")
	}

	moved := *e
	moved.Maintainer = model.MaintainerPlacement{Node: "capture-1", Epoch: 4}
	if in := failedHere(&moved, now); in != nil {
		t.Fatalf("after the move, failedHere = %+v; the incident is about another placement", in)
	}
	if !maintainerExcluded(&moved, "capture-2", now) {
		t.Fatal("capture-2 is no longer excluded right after the move")
	}

	later := now.Add(MaintainerExclusion)
	if failedHere(e, later) != nil || maintainerExcluded(e, "capture-2", later) {
		t.Fatalf("still excluded %s after the incident", MaintainerExclusion+time.Minute)
	}
}
