package coordinator

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A rebalance move whose destination left goes to the schedulable
// capture with the fewest of the changefeed's partitions: never to a
// Draining one, whatever it holds, and never counting other changefeeds.
func TestARebalanceMoveIsReplannedOntoTheLeastLoadedCapture(t *testing.T) {
	st := &meta.State{Nodes: map[model.NodeID]meta.NodeEntry{}, Liveness: map[model.NodeID]meta.LivenessEntry{},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{}}
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3", "capture-4"} {
		st.Nodes[id] = meta.NodeEntry{Info: model.NodeInfo{ID: id}}
	}
	st.Liveness["capture-4"] = meta.LivenessEntry{Record: model.LivenessRecord{State: model.LivenessDraining}}
	place := func(cf model.ChangefeedID, on map[model.NodeID]int) {
		st.Partitions[cf] = map[string]meta.RouteRecord{}
		for node, n := range on {
			for i := range n {
				id := string(node) + "/" + string(rune('a'+i))
				st.Partitions[cf][id] = meta.RouteRecord{Route: model.RouteEntry{ID: id, Node: node}}
			}
		}
	}
	place("hot", map[model.NodeID]int{"capture-1": 5, "capture-2": 3, "capture-3": 4})
	// Another changefeed's partitions do not count, and the Draining
	// capture holding none is not a destination.
	place("other", map[model.NodeID]int{"capture-2": 9})
	if to, ok := leastLoaded(st, "hot"); !ok || to != "capture-2" {
		t.Fatalf("least loaded for hot: %s %v, want capture-2", to, ok)
	}
	place("hot", map[model.NodeID]int{"capture-1": 5, "capture-2": 3})
	if to, ok := leastLoaded(st, "hot"); !ok || to != "capture-3" {
		t.Fatalf("least loaded for hot with capture-3 empty: %s %v, want capture-3", to, ok)
	}
}

// A split the coordinator requested and failed over before it saved the
// step as running is found done by the next coordinator, not begun again
// (which the store refuses: the key is the partition's end now).
func TestASplitMadeBeforeAFailoverIsFoundDone(t *testing.T) {
	s := plan.Step{Kind: plan.StepSplitPartition, Partition: "p1", Key: "m", From: "capture-1"}
	cut := model.RouteEntry{ID: "p1", Span: model.Span{Table: "t", End: "m"}, Node: "capture-1", Status: model.PartitionActive,
		History: []model.PartitionEvent{{Kind: "split", Detail: "at m"}}}
	if got := checkSplit(s, exec.StepPending, cut); !got.Done {
		t.Fatalf("a pending split step of a partition cut at its key: %+v; want done", got)
	}
	whole := model.RouteEntry{ID: "p1", Span: model.Span{Table: "t"}, Node: "capture-1", Status: model.PartitionActive}
	if got := checkSplit(s, exec.StepPending, whole); got.Done || got.Failed != "" || got.Waiting != "" {
		t.Fatalf("a pending split step of a partition not cut yet: %+v; want it begun", got)
	}
}
