package plan

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// scaleSnapshot is a large cluster as the planner reads it: nodes
// captures, feeds changefeeds (maintainers round-robin), each with per
// partitions of two tables cut at even keys, placed round-robin.
func scaleSnapshot(nodes, feeds, per int) *model.Snapshot {
	s := &model.Snapshot{ClusterID: "c", Revision: 1 << 40, Coordinator: "capture-1"}
	rev := model.Revision(1)
	for i := 1; i <= nodes; i++ {
		s.Nodes = append(s.Nodes, model.NodeState{Info: model.NodeInfo{ID: model.NodeID(fmt.Sprintf("capture-%d", i))},
			Liveness: model.LivenessAlive, NodeRevision: rev, LivenessRevision: rev + 1})
		rev += 2
	}
	s.Partitions = make([]model.PartitionState, 0, feeds*per)
	pid := 0
	for f := 0; f < feeds; f++ {
		cf := model.ChangefeedID(fmt.Sprintf("cf%05d", f))
		s.Changefeeds = append(s.Changefeeds, model.ChangefeedPlacement{ID: cf, State: model.ChangefeedNormal,
			Maintainer: model.MaintainerPlacement{Node: model.NodeID(fmt.Sprintf("capture-%d", f%nodes+1)), Epoch: 1}, MaintainerRevision: rev})
		rev++
		for j := 0; j < per; j++ {
			pid++
			half := per / 2
			span := model.Span{Table: "public.t1", Start: fmt.Sprintf("k%06d", j*1000), End: fmt.Sprintf("k%06d", (j+1)*1000)}
			if j >= half {
				span = model.Span{Table: "public.t2", Start: fmt.Sprintf("k%06d", (j-half)*1000), End: fmt.Sprintf("k%06d", (j-half+1)*1000)}
			}
			s.Partitions = append(s.Partitions, model.PartitionState{Revision: rev, Route: model.RouteEntry{
				ID: fmt.Sprintf("p%d", pid), Changefeed: cf, Span: span, Status: model.PartitionActive, Epoch: 1,
				Node: model.NodeID(fmt.Sprintf("capture-%d", (f+j)%nodes+1)),
			}})
			rev++
		}
	}
	return s
}

// BenchmarkDrainPlanAtScale plans the drain of one capture of 10 in a
// cluster of 10,000 changefeeds and 1,000,000 partitions (CDCCTL_BENCH
// sizes aside), as `cdcctl drain --dry-run` does, and checks the plan
// against the same snapshot, as the coordinator does before it begins
// (plan.Check). The baseline is the least any drain plan does: one
// pass over the snapshot counting the partitions per changefeed on the
// capture. It reports the plan's and the check's time, their ratios to
// the baseline, and the plan file's size; and the time to plan and check
// a move of one partition in the same cluster.
//
//	go test -run '^$' -bench DrainPlanAtScale -benchtime 3x -benchmem ./internal/plan
func BenchmarkDrainPlanAtScale(b *testing.B) {
	s := scaleSnapshot(10, 10_000, 100)
	target := model.NodeID("capture-3")
	var planT, checkT, baseT, moveT time.Duration
	size := 0
	for i := 0; i < b.N; i++ {
		began := time.Now()
		on := map[model.ChangefeedID]int{}
		for _, p := range s.Partitions {
			if p.Route.Node == target {
				on[p.Route.Changefeed]++
			}
		}
		baseT += time.Since(began)
		if len(on) == 0 {
			b.Fatal("the capture holds nothing")
		}

		began = time.Now()
		p, err := Drain(s, target, 8, DefaultCosts)
		if err != nil {
			b.Fatal(err)
		}
		planT += time.Since(began)

		began = time.Now()
		if changes := Check(p, s); len(changes) != 0 {
			b.Fatalf("a plan is stale against its own snapshot: %v", changes[:1])
		}
		checkT += time.Since(began)

		out, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)

		// A move of one partition reads four objects: it plans and
		// checks without listing the million others.
		began = time.Now()
		mv, err := Move(s, "p500000", "capture-1", DefaultCosts)
		if err != nil {
			b.Fatal(err)
		}
		if changes := Check(mv, s); len(changes) != 0 {
			b.Fatalf("a move is stale against its own snapshot: %v", changes)
		}
		moveT += time.Since(began)
	}
	n := float64(b.N)
	b.ReportMetric(planT.Seconds()/n, "plan-s")
	b.ReportMetric(checkT.Seconds()/n, "check-s")
	b.ReportMetric(baseT.Seconds()/n, "walk-s")
	b.ReportMetric(planT.Seconds()/baseT.Seconds(), "plan/walk")
	b.ReportMetric(checkT.Seconds()/baseT.Seconds(), "check/walk")
	b.ReportMetric(float64(size)/(1<<20), "plan-MiB")
	b.ReportMetric(moveT.Seconds()/n, "move-and-check-s")
}
