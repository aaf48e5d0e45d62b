package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// spans gives changefeed a's partitions p1..p3 real key ranges of one
// table: ["", "g"), ["g", "n"), ["n", ∞).
func withSpans(s *model.Snapshot) *model.Snapshot {
	bounds := []model.Span{{Table: "t1", End: "g"}, {Table: "t1", Start: "g", End: "n"}, {Table: "t1", Start: "n"}}
	for i := range s.Partitions {
		if i < len(bounds) {
			s.Partitions[i].Route.Span = bounds[i]
		}
	}
	return s
}

func TestSplitAndMoveFollowSeed003sRules(t *testing.T) {
	s := withSpans(snapshot(3, map[string]string{"a": "capture-1"}, 3)) // p1 on capture-1, p2 on capture-2, p3 on capture-3
	busy := withSpans(snapshot(3, map[string]string{"a": "capture-1"}, 3))
	busy.Partitions[1].Route.Status, busy.Partitions[1].Route.Target = model.PartitionDraining, "capture-3"
	draining := withSpans(snapshot(3, map[string]string{"a": "capture-1"}, 3))
	draining.Nodes[2].Liveness = model.LivenessDraining
	paused := withSpans(snapshot(3, map[string]string{"a": "capture-1"}, 3))
	paused.Changefeeds[0].State = model.ChangefeedPaused
	var refusal *Refusal
	var isBusy *BusyError
	for _, tt := range []struct {
		name string
		err  error
		want string
		as   any
	}{
		{"split: unknown", second(Split(s, "p9", "x", DefaultCosts)), "partition p9 not found", &refusal},
		{"split: key at start", second(Split(s, "p2", "g", DefaultCosts)), `must be greater than the partition's start "g"`, &refusal},
		{"split: key below", second(Split(s, "p2", "a", DefaultCosts)), "must be greater", &refusal},
		{"split: key at end", second(Split(s, "p2", "n", DefaultCosts)), `must be less than the partition's end "n"`, &refusal},
		{"split: empty key of the first", second(Split(s, "p1", "", DefaultCosts)), "must be greater", &refusal},
		{"split: busy", second(Split(busy, "p2", "h", DefaultCosts)), "partition p2 is busy: moving capture-2 → capture-3", &isBusy},
		{"split: its capture Draining", second(Split(draining, "p3", "x", DefaultCosts)), "its capture capture-3 is Draining", &refusal},
		{"move: unknown", second(Move(s, "p9", "capture-1", DefaultCosts)), "partition p9 not found", &refusal},
		{"move: unknown capture", second(Move(s, "p2", "capture-9", DefaultCosts)), "capture not found", &refusal},
		{"move: same capture", second(Move(s, "p2", "capture-2", DefaultCosts)), "it is already there", &refusal},
		{"move: target Draining", second(Move(draining, "p2", "capture-3", DefaultCosts)), "it is Draining and takes no new work", &refusal},
		{"move: busy", second(Move(busy, "p2", "capture-1", DefaultCosts)), "is busy", &isBusy},
		{"move: changefeed paused", second(Move(paused, "p2", "capture-1", DefaultCosts)), "changefeed a is paused", &refusal},
		{"split: changefeed paused", second(Split(paused, "p2", "h", DefaultCosts)), "resume it first", &refusal},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) || !errors.As(tt.err, tt.as) {
			t.Errorf("%s: %v, want %q", tt.name, tt.err, tt.want)
		}
	}
	// Open upper end: any key above the start.
	p, err := Split(s, "p3", "zz", DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Batches[0].Steps[0]
	if st.Kind != StepSplitPartition || st.Key != "zz" || st.From != "capture-3" || st.To != "capture-3" {
		t.Fatalf("split step %+v", st)
	}
	// The fingerprint holds what the plan read, and nothing else: another
	// partition moving leaves it valid; this one moving makes it stale.
	later := withSpans(snapshot(3, map[string]string{"a": "capture-1"}, 3))
	later.Partitions[0].Revision += 100
	if ch := Check(p, later); len(ch) != 0 {
		t.Fatalf("an unrelated partition made it stale: %v", ch)
	}
	later.Partitions[2].Revision += 100
	if ch := Check(p, later); len(ch) != 0 {
		t.Fatalf("a write that left its placement as it was made it stale: %v", ch)
	}
	later.Partitions[2].Route.Node = "capture-2"
	if ch := Check(p, later); len(ch) != 1 || ch[0].Object != "partition/a/p3" {
		t.Fatalf("stale: %v", ch)
	}
	later.Nodes = append(later.Nodes, model.NodeState{Info: model.NodeInfo{ID: "capture-4"}, Liveness: model.LivenessAlive, NodeRevision: 999})
	if ch := Check(p, later); len(ch) != 1 {
		t.Fatalf("a new capture does not matter to a split: %v", ch)
	}
}

func TestRebalanceMovesTheFewestPartitions(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-1"}, 9)
	for i := range s.Partitions {
		s.Partitions[i].Route.Node = "capture-1" // all nine on one capture
	}
	p, err := Rebalance(s, "a", 2, false, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.PartitionMoves(); got != 6 {
		t.Fatalf("%d moves, want 6 (9 → 3/3/3)", got)
	}
	if len(p.Batches) != 3 || len(p.Batches[0].Steps) != 2 {
		t.Fatalf("batches of 2: %+v", p.Batches)
	}
	after := map[model.NodeID]int{}
	for _, d := range Diff(s, p) {
		after[d.Node] = d.PartitionsAfter
	}
	if after["capture-1"] != 3 || after["capture-2"] != 3 || after["capture-3"] != 3 {
		t.Fatalf("after: %v", after)
	}
	// Pinned partitions (moved there by hand) stay; the others move.
	pinned := snapshot(3, map[string]string{"a": "capture-1"}, 9)
	for i := range pinned.Partitions {
		pinned.Partitions[i].Route.Node = "capture-1"
		pinned.Partitions[i].Route.Pinned = i < 8
	}
	if p, err := Rebalance(pinned, "a", 2, false, DefaultCosts); err != nil {
		t.Fatal(err)
	} else if p.PartitionMoves() != 1 {
		t.Fatalf("eight of nine pinned: %d moves, want 1", p.PartitionMoves())
	} else if st := p.Batches[0].Steps[0]; st.Partition != pinned.Partitions[8].Route.ID {
		t.Fatalf("moved %s, a pinned partition", st.Partition)
	}
	if p, err := Rebalance(pinned, "a", 2, true, DefaultCosts); err != nil || p.PartitionMoves() != 6 {
		t.Fatalf("pinned ones may move: %v, %+v", err, p)
	}
	// A capture drained (Stopping until its process restarts) or being
	// drained is no destination, but the plan holds while it stays so:
	// it was refused as stale ("capture-3 appeared") every time.
	for _, l := range []model.Liveness{model.LivenessStopping, model.LivenessDraining} {
		drained := snapshot(3, map[string]string{"a": "capture-1"}, 9)
		for i := range drained.Partitions {
			drained.Partitions[i].Route.Node = "capture-1"
		}
		drained.Nodes[2].Liveness = l
		drained.Nodes[2].LivenessRevision += 1000 // the drain's write
		p, err := Rebalance(drained, "a", 2, false, DefaultCosts)
		if err != nil {
			t.Fatal(err)
		}
		if changed := Check(p, drained); len(changed) != 0 || p.PartitionMoves() != 4 {
			t.Fatalf("beside a %s capture: %d moves, stale at once: %v", l, p.PartitionMoves(), changed)
		}
		back := snapshot(3, map[string]string{"a": "capture-1"}, 9)
		if changed := Check(p, back); len(changed) == 0 {
			t.Fatalf("the %s capture back Alive (a destination now) leaves the plan valid", l)
		}
	}
	// Balanced: nothing to do.
	even := snapshot(3, map[string]string{"a": "capture-1"}, 9)
	if p, err := Rebalance(even, "a", 2, false, DefaultCosts); err != nil || len(p.Batches) != 0 {
		t.Fatalf("balanced: %v %+v", err, p)
	}
	if _, err := Rebalance(s, "zz", 2, false, DefaultCosts); err == nil || !strings.Contains(err.Error(), "changefeed zz not found") {
		t.Fatalf("unknown changefeed: %v", err)
	}
}

func second(_ *Plan, err error) error { return err }
