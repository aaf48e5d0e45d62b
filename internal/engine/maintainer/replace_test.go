package maintainer

import (
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition about to be placed again (its node gone, or restarted as a
// new process) waits until the position its old node reported is
// persisted: the next placement resumes from the persisted position, and
// what the old node wrote beyond it would be written twice. A move whose
// source is gone waits too (its target resumes from the persisted
// position); partitions whose node runs them (a move's source hands over
// its own position), or never placed, do not wait. A
// hand-over position kept only in the route counts as not persisted: the
// next placement drops it.
func TestAPartitionIsPlacedAgainOnlyFromTheLastPositionHeard(t *testing.T) {
	const cf = model.ChangefeedID("cf")
	route := func(id string, node model.NodeID, rev int64, status model.PartitionStatus) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: id, Changefeed: cf, Node: node, Epoch: 3, Status: status}, Revision: rev}
	}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {Info: model.ChangefeedInfo{ID: cf, StartTs: 100}}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {
			"gone":      route("gone", "n9", 10, model.PartitionActive),      // n9 left the cluster
			"restarted": route("restarted", "n2", 10, model.PartitionActive), // placed on n2's previous process
			"running":   route("running", "n1", 30, model.PartitionActive),
			"new":       route("new", "", 10, model.PartitionActive),
			"moving":    route("moving", "n9", 10, model.PartitionDraining),  // its source gone mid-move
			"handing":   route("handing", "n1", 30, model.PartitionDraining), // its source hands it over
			"caught-up": route("caught-up", "n9", 10, model.PartitionActive),
			// Moved gracefully to n9, which stopped before it started it:
			// its hand-over position is only in the route.
			"handed": {Route: model.RouteEntry{ID: "handed", Changefeed: cf, Node: "n9", Epoch: 3, Status: model.PartitionActive, Start: 650}, Revision: 10},
		}},
		Nodes: map[model.NodeID]meta.NodeEntry{"n1": {Revision: 20}, "n2": {Revision: 20}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
			"gone":      {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"restarted": {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"running":   {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"moving":    {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"handing":   {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"caught-up": {Progress: model.Progress{Checkpoint: 700, Epoch: 3}},
			"handed":    {Progress: model.Progress{Checkpoint: 500, Epoch: 2}},
		}},
	}
	heard := model.ProgressTable{
		"gone":      {Checkpoint: 700, Epoch: 3, Final: true},
		"restarted": {Checkpoint: 650, Epoch: 3},
		"running":   {Checkpoint: 700, Epoch: 3},
		"new":       {Checkpoint: 100},
		"moving":    {Checkpoint: 700, Epoch: 3, Final: true},
		"handing":   {Checkpoint: 700, Epoch: 3},
		"caught-up": {Checkpoint: 700, Epoch: 3},
		"handed":    {Checkpoint: 650, Epoch: 3}, // positions() folds Start in
	}
	e := st.Changefeeds[cf]
	if got, want := heardBeyondSaved(st, e, heard), []string{"gone", "handed", "moving", "restarted"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("waiting to be persisted: %v, want %v", got, want)
	}
	// Once persisted, they are placed.
	st.Progress[cf]["gone"] = meta.ProgressRecord{Progress: heard["gone"]}
	st.Progress[cf]["restarted"] = meta.ProgressRecord{Progress: heard["restarted"]}
	st.Progress[cf]["handed"] = meta.ProgressRecord{Progress: heard["handed"]}
	st.Progress[cf]["moving"] = meta.ProgressRecord{Progress: heard["moving"]}
	if got := heardBeyondSaved(st, e, heard); len(got) != 0 {
		t.Fatalf("after the write, still waiting: %v", got)
	}
}
