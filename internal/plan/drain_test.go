package plan

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// snapshot builds a cluster: nodes (capture-1 coordinator), changefeeds
// with maintainers, partitions per changefeed spread round-robin.
func snapshot(nodes int, maintainers map[string]string, partitionsPer int) *model.Snapshot {
	s := &model.Snapshot{ClusterID: "c", Revision: 100, Coordinator: "capture-1"}
	rev := model.Revision(1)
	for i := 1; i <= nodes; i++ {
		id := model.NodeID(fmt.Sprintf("capture-%d", i))
		s.Nodes = append(s.Nodes, model.NodeState{Info: model.NodeInfo{ID: id}, Liveness: model.LivenessAlive, NodeRevision: rev, LivenessRevision: rev + 1})
		rev += 2
	}
	pid := 0
	for _, cf := range []string{"a", "b", "c", "d", "e"} {
		node, ok := maintainers[cf]
		if !ok {
			continue
		}
		s.Changefeeds = append(s.Changefeeds, model.ChangefeedPlacement{ID: model.ChangefeedID(cf), State: model.ChangefeedNormal,
			Maintainer: model.MaintainerPlacement{Node: model.NodeID(node), Epoch: 1}, MaintainerRevision: rev})
		rev++
		for j := 0; j < partitionsPer; j++ {
			pid++
			s.Partitions = append(s.Partitions, model.PartitionState{Revision: rev, Route: model.RouteEntry{
				ID: fmt.Sprintf("p%d", pid), Changefeed: model.ChangefeedID(cf), Span: model.Span{Table: "t0001"},
				Node: model.NodeID(fmt.Sprintf("capture-%d", j%nodes+1)), Status: model.PartitionActive, Epoch: 1,
			}})
			rev++
		}
	}
	return s
}

func TestDrainPlanFollowsSeed000(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-3", "c": "capture-3", "d": "capture-1"}, 6)
	p, err := Drain(s, "capture-3", 2, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	// Draining first, Stopping last; maintainers in batches of at most 2
	// before any partition moves.
	first, last := p.Batches[0].Steps[0], p.Batches[len(p.Batches)-1].Steps[0]
	if first.Kind != StepSetLiveness || first.Liveness != "Draining" || last.Kind != StepSetLiveness || last.Liveness != "Stopping" {
		t.Fatalf("first %+v, last %+v", first, last)
	}
	if len(p.Batches[1].Steps) != 2 || len(p.Batches[2].Steps) != 1 || p.Batches[2].Steps[0].Kind != StepMoveMaintainer {
		t.Fatalf("maintainer batches %+v %+v", p.Batches[1], p.Batches[2])
	}
	// Destinations count moves already planned: capture-1 has one, so the
	// three go capture-2, then capture-1/capture-2 alternately — never all
	// to one node.
	dests := map[model.NodeID]int{}
	for _, b := range p.Batches[1:3] {
		for _, st := range b.Steps {
			dests[st.To]++
		}
	}
	if dests["capture-3"] != 0 || dests["capture-1"]+dests["capture-2"] != 3 || dests["capture-2"] < dests["capture-1"] {
		t.Fatalf("maintainer destinations %v", dests)
	}
	if got := p.PartitionMoves(); got != 8 { // 4 changefeeds × 6 partitions, 2 of each on capture-3
		t.Fatalf("%d partition moves, want 8", got)
	}
	// One step per changefeed, all in the batch before Stopping.
	if got := p.Batches[len(p.Batches)-2].Steps; len(got) != 4 || got[0].Kind != StepMovePartitions || got[0].Count != 2 {
		t.Fatalf("partition batch %+v", got)
	}
	for _, d := range Diff(s, p) {
		if d.Node == "capture-3" && (d.MaintainersAfter != 0 || d.PartitionsAfter != 0 || d.LivenessAfter != "Stopping") {
			t.Fatalf("capture-3 after the plan: %+v", d)
		}
		if d.Node != "capture-3" && d.MaintainersAfter+d.PartitionsAfter <= d.MaintainersBefore+d.PartitionsBefore {
			t.Fatalf("%s gained nothing: %+v", d.Node, d)
		}
	}
	if p.PredictedMillis <= 0 {
		t.Fatal("no prediction")
	}
	// The same snapshot gives the same plan: the planner is deterministic.
	again, _ := Drain(s, "capture-3", 2, DefaultCosts)
	var a, b bytes.Buffer
	_ = Render(&a, s, p)
	_ = Render(&b, s, again)
	if a.String() != b.String() {
		t.Fatal("two plans of one snapshot differ")
	}
	for _, want := range []string{"Plan: drain capture-3", "capture-3  Alive → Stopping  3 → 0 (-3)", "maintainer a capture-3 → capture-2"} {
		if !strings.Contains(a.String(), want) {
			t.Errorf("rendering lacks %q:\n%s", want, a.String())
		}
	}
}

func TestDrainRefusals(t *testing.T) {
	base := func() *model.Snapshot { return snapshot(3, map[string]string{"a": "capture-2"}, 3) }
	for _, tc := range []struct {
		name   string
		snap   func() *model.Snapshot
		target model.NodeID
		reason RefusalReason
		says   string
	}{
		{"unknown capture", base, "capture-9", RefuseNotFound, "capture not found"},
		{"the coordinator", base, "capture-1", RefuseInvalid, "cdcctl coordinator resign"},
		{"a single capture", func() *model.Snapshot { s := snapshot(1, nil, 0); s.Coordinator = "x"; return s }, "capture-1", RefuseInvalid, "at least 2 captures"},
		{"a drain in progress", func() *model.Snapshot {
			s := base()
			s.Draining = "capture-3"
			s.Nodes[2].Liveness = model.LivenessDraining
			return s
		}, "capture-2", RefuseInProgress, "another drain"},
		{"nowhere to go", func() *model.Snapshot {
			s := base()
			s.Nodes[0].Liveness = model.LivenessStopping
			s.Nodes[2].Liveness = model.LivenessStopping
			return s
		}, "capture-2", RefuseNoDestination, "no other capture is Alive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Drain(tc.snap(), tc.target, 1, DefaultCosts)
			var r *Refusal
			if !errors.As(err, &r) || r.Reason != tc.reason || !strings.Contains(err.Error(), tc.says) || r.Hint == "" {
				t.Fatalf("got %v, want %s mentioning %q", err, tc.reason, tc.says)
			}
		})
	}
}

func TestStaleCheckNamesWhatChangedAndIgnoresTheRest(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-2"}, 4)
	p, err := Drain(s, "capture-3", 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if ch := Check(p, s); ch != nil {
		t.Fatalf("fresh plan reported stale: %v", ch)
	}
	// A write the plan did not read (a checkpoint moving) changes the
	// cluster revision only.
	later := *s
	later.Revision += 50
	if ch := Check(p, &later); ch != nil {
		t.Fatalf("unrelated write made the plan stale: %v", ch)
	}
	// A partition it read moved; a destination went Draining; a capture
	// joined.
	moved := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-2"}, 4)
	moved.Partitions[1].Revision = 999
	moved.Partitions[1].Route.Node = "capture-1"
	moved.Nodes[1].Liveness, moved.Nodes[1].LivenessRevision = model.LivenessDraining, 998
	moved.Nodes = append(moved.Nodes, model.NodeState{Info: model.NodeInfo{ID: "capture-4"}, NodeRevision: 1000, LivenessRevision: 1000})
	ch := Check(p, moved)
	if len(ch) != 3 {
		t.Fatalf("changes %v", ch)
	}
	text := fmt.Sprint(ch)
	// A drain read every partition: they are digested by changefeed, and
	// the changefeed whose partition moved is named.
	for _, want := range []string{"partitions/a changed (revision 11 → 999)", "liveness/capture-2 changed (revision", "node/capture-4 appeared"} {
		if !strings.Contains(text, want) {
			t.Errorf("changes %s lack %q", text, want)
		}
	}
	// A partition recovered in place (a new epoch on the same capture,
	// a line in its history) still holds what the plan decided on.
	recovered := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-2"}, 4)
	for i := range recovered.Partitions {
		r := &recovered.Partitions[i]
		r.Revision += 100
		r.Route.Epoch++
		r.Route.Remember(model.PartitionEvent{Kind: "recovered", Epoch: r.Route.Epoch - 1})
	}
	if ch := Check(p, recovered); ch != nil {
		t.Fatalf("recoveries in place made the plan stale: %v", ch)
	}
	// A drain saved before partitions were digested by changefeed (an
	// object and a placement per partition) is checked as it was: by
	// placements, naming the partition that moved...
	saved := *p
	saved.Fingerprint = Fingerprint{Revision: s.Revision, Objects: snapshotObjects(s), AllNodes: true}
	saved.Fingerprint.Placements = placementsOf(s, saved.Fingerprint.Objects)
	if ch := Check(&saved, recovered); ch != nil {
		t.Fatalf("a saved plan: recoveries in place made it stale: %v", ch)
	}
	if ch := fmt.Sprint(Check(&saved, moved)); !strings.Contains(ch, "partition/a/p2 changed (revision") {
		t.Fatalf("a saved plan: changes %s lack the partition that moved", ch)
	}
	// ... and one computed before placements were fingerprinted by
	// revisions alone.
	saved.Fingerprint.Placements = nil
	if ch := Check(&saved, recovered); len(ch) != len(recovered.Partitions) {
		t.Fatalf("a plan without placements: changes %v", ch)
	}
	// A partition split (one more in the changefeed) or removed changes
	// its changefeed's digest.
	split := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-2"}, 4)
	split.Partitions = append(split.Partitions, model.PartitionState{Revision: 1001, Route: model.RouteEntry{ID: "p99", Changefeed: "b", Span: model.Span{Table: "t0001"}, Node: "capture-1", Status: model.PartitionActive}})
	split.Partitions = slices.Delete(split.Partitions, 0, 1)
	if ch := fmt.Sprint(Check(p, split)); !strings.Contains(ch, "partitions/a changed") || !strings.Contains(ch, "partitions/b changed") {
		t.Fatalf("a partition added to b and one of a removed: changes %s", ch)
	}
}

// A plan file edited by hand is checked like the API's own requests.
func TestCheckRefusesPlansNoPlannerMakes(t *testing.T) {
	good := Plan{Version: 1, Kind: "drain", BatchSize: 2, Fingerprint: Fingerprint{Objects: map[string]model.Revision{"nodes/a": 1}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("a planner's plan: %v", err)
	}
	for _, c := range []struct {
		edit func(*Plan)
		want string
	}{
		{func(p *Plan) { p.BatchSize = -7 }, "batch_size -7 is out of range: use a batch between 1 and 1000"},
		{func(p *Plan) { p.BatchSize = 1001 }, "batch_size 1001 is out of range"},
		{func(p *Plan) { p.Kind = "explode" }, `plan kind "explode"`},
		{func(p *Plan) { p.Version = 2 }, "plan version 2"},
		{func(p *Plan) { p.Fingerprint.Objects = nil }, "no fingerprint"},
		// A step the plan's driver has no code for stayed pending: the
		// plan Running for ever.
		{func(p *Plan) { p.Batches = []Batch{{Steps: []Step{{Kind: "teleport-partition"}}}} }, `batch 1 has a "teleport-partition" step, which a drain plan does not have`},
		{func(p *Plan) {
			p.Batches = []Batch{{Steps: []Step{{Kind: StepSetLiveness}}}, {Steps: []Step{{Kind: StepSplitPartition}}}}
		}, `batch 2 has a "split-partition" step`},
	} {
		p := good
		c.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

// The fingerprint as plans saved before this version made it: an object
// and a placement per partition.

// snapshotObjects lists every object of a snapshot with its revision.
func snapshotObjects(s *model.Snapshot) map[string]model.Revision {
	out := make(map[string]model.Revision, 2*len(s.Nodes)+len(s.Changefeeds)+len(s.Partitions))
	addClusterObjects(out, s)
	for _, p := range s.Partitions {
		out[partitionObject(p.Route.Changefeed, p.Route.ID)] = p.Revision
	}
	return out
}

// placementsOf digests the placement of each partition among objects.
func placementsOf(s *model.Snapshot, objects map[string]model.Revision) map[string]string {
	// Sized at once: a map of a million placements grown by doubling
	// spent a third of a large drain's planning rehashing.
	out := make(map[string]string, min(len(objects), len(s.Partitions)))
	for _, p := range s.Partitions {
		obj := partitionObject(p.Route.Changefeed, p.Route.ID)
		if _, read := objects[obj]; read {
			out[obj] = placementDigest(p.Route)
		}
	}
	return out
}
