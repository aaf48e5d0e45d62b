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
// what the old node wrote beyond it would be written twice. Partitions
// whose node runs them, never placed, or being moved, do not wait.
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
			"moving":    route("moving", "n9", 10, model.PartitionDraining),
			"caught-up": route("caught-up", "n9", 10, model.PartitionActive),
		}},
		Nodes: map[model.NodeID]meta.NodeEntry{"n1": {Revision: 20}, "n2": {Revision: 20}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
			"gone":      {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"restarted": {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"running":   {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"moving":    {Progress: model.Progress{Checkpoint: 500, Epoch: 3}},
			"caught-up": {Progress: model.Progress{Checkpoint: 700, Epoch: 3}},
		}},
	}
	heard := model.ProgressTable{
		"gone":      {Checkpoint: 700, Epoch: 3, Final: true},
		"restarted": {Checkpoint: 650, Epoch: 3},
		"running":   {Checkpoint: 700, Epoch: 3},
		"new":       {Checkpoint: 100},
		"moving":    {Checkpoint: 700, Epoch: 3, Final: true},
		"caught-up": {Checkpoint: 700, Epoch: 3},
	}
	e := st.Changefeeds[cf]
	if got, want := heardBeyondSaved(st, e, heard), []string{"gone", "restarted"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("waiting to be persisted: %v, want %v", got, want)
	}
	// Once persisted, they are placed.
	st.Progress[cf]["gone"] = meta.ProgressRecord{Progress: heard["gone"]}
	st.Progress[cf]["restarted"] = meta.ProgressRecord{Progress: heard["restarted"]}
	if got := heardBeyondSaved(st, e, heard); len(got) != 0 {
		t.Fatalf("after the write, still waiting: %v", got)
	}
}
