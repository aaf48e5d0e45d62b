package dispatcher

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A node's share of the routing table is built again whenever a
// changefeed's routing table or state changes, and only then: the same
// maps come back for a state whose routing tables are the ones it was
// built from. It names the changefeeds whose part changed since it was
// last asked (take), which are all a reconcile pass looks at.
func TestTheShareFollowsTheRoutingTable(t *testing.T) {
	const a, b = model.ChangefeedID("a"), model.ChangefeedID("b")
	route := func(c model.ChangefeedID, pid string, node model.NodeID, status model.PartitionStatus) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: c, Node: node, Epoch: 1, Status: status}}
	}
	entry := func(c model.ChangefeedID, state model.ChangefeedState) *meta.ChangefeedEntry {
		return &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: c}, Status: model.ChangefeedStatus{State: state}}
	}
	routesA := map[string]meta.RouteRecord{
		"p1": route(a, "p1", "n1", model.PartitionActive),
		"p2": route(a, "p2", "n2", model.PartitionActive),
		"p3": route(a, "p3", "n1", model.PartitionDraining),
	}
	routesB := map[string]meta.RouteRecord{"q1": route(b, "q1", "n1", model.PartitionActive)}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{a: entry(a, model.ChangefeedNormal), b: entry(b, model.ChangefeedNormal)},
		Partitions:  map[model.ChangefeedID]map[string]meta.RouteRecord{a: routesA, b: routesB},
	}
	keys := func(m map[string]meta.RouteRecord) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	var s share
	want, moving := s.of(st, "n1")
	if got := keys(want); !reflect.DeepEqual(got, []string{"a/p1", "b/q1"}) {
		t.Fatalf("want %v", got)
	}
	if got := keys(moving); !reflect.DeepEqual(got, []string{"a/p3"}) {
		t.Fatalf("moving %v", got)
	}
	taken := func(want ...model.ChangefeedID) {
		t.Helper()
		dirty, whole := s.take()
		var got []model.ChangefeedID
		for cf := range dirty {
			got = append(got, cf)
		}
		slices.Sort(got)
		if whole || !reflect.DeepEqual(got, want) {
			t.Fatalf("changed %v (whole %v), want %v", got, whole, want)
		}
	}
	if _, whole := s.take(); !whole {
		t.Fatal("the share's first build is not a whole one")
	}

	// The same tables (another state, progress moved): nothing changed.
	built := s.built
	again := *st
	if w, _ := s.of(&again, "n1"); s.built != built || !reflect.DeepEqual(keys(w), []string{"a/p1", "b/q1"}) {
		t.Fatalf("built again (%d, was %d) although no routing table changed: want %v", s.built, built, keys(w))
	}
	taken()

	// A routing table replaced: that changefeed's part built again, and
	// right; the other's left as it was.
	moved := map[string]meta.RouteRecord{"q1": route(b, "q1", "n2", model.PartitionActive), "q2": route(b, "q2", "n1", model.PartitionActive)}
	next := *st
	next.Partitions = map[model.ChangefeedID]map[string]meta.RouteRecord{a: routesA, b: moved}
	if w, m := s.of(&next, "n1"); s.built == built || !reflect.DeepEqual(keys(w), []string{"a/p1", "b/q2"}) || !reflect.DeepEqual(keys(m), []string{"a/p3"}) {
		t.Fatalf("after b's table changed (built %d, was %d): want %v, moving %v", s.built, built, keys(w), keys(m))
	}
	taken(b)

	// A changefeed paused: its partitions are no longer wanted here.
	paused := next
	paused.Changefeeds = map[model.ChangefeedID]*meta.ChangefeedEntry{a: entry(a, model.ChangefeedPaused), b: st.Changefeeds[b]}
	if w, m := s.of(&paused, "n1"); !reflect.DeepEqual(keys(w), []string{"b/q2"}) || !reflect.DeepEqual(keys(m), []string{"a/p3"}) {
		t.Fatalf("after pausing a: want %v, moving %v", keys(w), keys(m))
	}
	taken(a)

	// A changefeed removed.
	gone := paused
	gone.Changefeeds = map[model.ChangefeedID]*meta.ChangefeedEntry{b: st.Changefeeds[b]}
	gone.Partitions = map[model.ChangefeedID]map[string]meta.RouteRecord{b: moved}
	if w, m := s.of(&gone, "n1"); !reflect.DeepEqual(keys(w), []string{"b/q2"}) || len(m) != 0 {
		t.Fatalf("after removing a: want %v, moving %v", keys(w), keys(m))
	}
	taken(a)
}

// A process that registers under a node id another process used before
// runs none of the partitions placed on that earlier process, even
// while they still name the id: their maintainer places them again (it
// may place them here, as a new placement), and running them meanwhile
// wrote them twice. A partition being moved away is still handed over.
func TestARestartedNodeRunsOnlyWhatWasPlacedOnIt(t *testing.T) {
	const cf = model.ChangefeedID("a")
	route := func(pid string, status model.PartitionStatus, rev int64) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf, Node: "n1", Epoch: 1, Status: status}, Revision: rev}
	}
	st := &meta.State{
		Nodes:       map[model.NodeID]meta.NodeEntry{"n1": {Revision: 100}},
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {Info: model.ChangefeedInfo{ID: cf}, Status: model.ChangefeedStatus{State: model.ChangefeedNormal}}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {
			"p1": route("p1", model.PartitionActive, 90),   // the previous process's
			"p2": route("p2", model.PartitionActive, 120),  // placed on this one
			"p3": route("p3", model.PartitionDraining, 80), // moved away from the previous one
			"p4": route("p4", model.PartitionActive, 100),  // written with the registration
		}},
	}
	var s share
	want, moving := s.of(st, "n1")
	if _, ok := want["a/p1"]; ok || len(want) != 2 {
		t.Fatalf("a restarted node runs %v; want only p2 and p4, placed on it", want)
	}
	if _, ok := moving["a/p3"]; !ok {
		t.Fatalf("moving %v: the partition moved away from the previous process must be handed over", moving)
	}
	// The same tables, the node registered again (another restart): the
	// share is built again, and now runs none of them.
	again := *st
	again.Nodes = map[model.NodeID]meta.NodeEntry{"n1": {Revision: 130}}
	if w, _ := s.of(&again, "n1"); len(w) != 0 {
		t.Fatalf("after another restart the node runs %v; want none", w)
	}
}
