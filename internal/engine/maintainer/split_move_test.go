package maintainer_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// demoSource is the load of the engine tests: 8 tables of 200 keys,
// 1,500 changes a second, a DDL every second.
const demoSource = "gen://?tables=8&keys=200&rate=1500&ddl_every=1s"

// Seed 003 under load: partitions are split and their upper halves moved
// to another capture, again and again, while the demo changefeed runs.
// The routing table covers every table's key space at every moment we
// look, and the sink ends up with every event exactly once, in per-key
// order.
func TestSplitsAndMovesUnderLoadAreExactlyOnce(t *testing.T) {
	t.Parallel()
	rounds := 6
	if enginetest.Race {
		rounds = 4
	}
	splitsAndMoves(t, enginetest.New(t, enginetest.Options{}), rounds)
}

// The same with the partitions' states in a bucket (--checkpoint-store
// file://…) instead of etcd: the halves' states are there, cut at the key.
func TestSplitsAndMovesWithStatesInABucket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := checkpoint.OpenBlob(context.Background(), "file://"+dir, enginetest.ClusterID)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := enginetest.New(t, enginetest.Options{Checkpoints: b})
	splitsAndMoves(t, c, 2)
	for _, r := range c.State().Partitions["demo"] {
		if r.Route.Start == 0 {
			continue // never handed over
		}
		state, _, err := b.Load(context.Background(), "demo", r.Route.ID)
		if err != nil {
			t.Fatalf("%s was handed over but its state is not in the bucket: %v", r.Route.ID, err)
		}
		a := &actor.Replication{}
		if err := a.Restore(state); err != nil || a.Span() != r.Route.Span {
			t.Fatalf("%s: state %v for %s, routing table %s", r.Route.ID, err, a.Span(), r.Route.Span)
		}
	}
	// Removing the changefeed removes its states from the bucket.
	statesDir := filepath.Join(dir, enginetest.ClusterID, "demo")
	if n := countFiles(t, statesDir); n == 0 {
		t.Fatalf("no states in %s before the removal", statesDir)
	}
	c.RemoveChangefeed("demo")
	if n := countFiles(t, statesDir); n != 0 {
		t.Fatalf("%d files left in %s after the changefeed was removed", n, statesDir)
	}
}

// countFiles counts the regular files under dir (0 if it does not exist).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

func splitsAndMoves(t *testing.T, c *enginetest.Cluster, rounds int) {
	c.StartCaptures(3)
	info := c.CreateChangefeed("demo", demoSource, "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	c.Warm("demo", time.Second)
	g := c.Generator(info.SourceURI)
	cov := enginetest.WatchCoverage(t, c.Store, "demo")
	var notes []string
	history := map[string]string{} // partition → what its history must say
	for round := range rounds {
		// A partition of a different table each round.
		table := g.TableNames()[round%len(g.TableNames())]
		var victim model.RouteEntry
		for _, r := range c.State().SortedPartitions("demo") {
			if r.Route.Span.Table == table && r.Route.Status == model.PartitionActive {
				victim = r.Route
				break
			}
		}
		key, ok := enginetest.MiddleKey(g, victim.Span)
		if !ok {
			t.Fatalf("%s %s has fewer than 2 keys", victim.ID, victim.Span)
		}
		split := c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, victim.ID, key, plan.DefaultCosts) })
		notes = append(notes, split.Steps[0].Note)
		if err := cov.Err(); err != nil {
			t.Fatalf("after splitting %s at %q: %v", victim.ID, key, err)
		}
		var upper model.RouteEntry
		for _, r := range c.State().Partitions["demo"] {
			if r.Route.Span.Table == table && r.Route.Span.Start == key {
				upper = r.Route
			}
		}
		if upper.ID == "" || upper.Node != victim.Node {
			t.Fatalf("no upper half of %s at %q on %s: %+v", victim.ID, key, victim.Node, upper)
		}
		to := c.FollowerOf(upper.Node)
		move := c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, upper.ID, to, plan.DefaultCosts) })
		notes = append(notes, upper.ID+" "+move.Steps[0].Note)
		if err := cov.Err(); err != nil {
			t.Fatalf("after moving %s to %s: %v", upper.ID, to, err)
		}
		history[victim.ID] = fmt.Sprintf("split at %q: upper half %s", key, upper.ID)
		history[upper.ID] = "moved"
		if r := c.State().Partitions["demo"][upper.ID].Route; r.Node != to || !r.Pinned {
			t.Fatalf("%s is on %s (pinned %v), want pinned on %s", upper.ID, r.Node, r.Pinned, to)
		}
	}
	// The operations show in the partitions' history.
	st := c.State()
	for id, want := range history {
		var kinds []string
		for _, ev := range st.Partitions["demo"][id].Route.History {
			kinds = append(kinds, ev.Kind+" "+ev.Detail)
		}
		if got := strings.Join(kinds, "; "); !strings.Contains(got, want) {
			t.Errorf("history of %s: %q, want %q in it", id, got, want)
		}
	}
	rep := c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after %d splits and moves: %+v", rounds, rep)
	}
	if err := cov.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d splits and moves; coverage held in %d checks; %d events verified, 0 lost, 0 duplicates\n%s", rounds, cov.Count(), rep.Expected, strings.Join(notes, "\n"))
}

// partition rebalance --move-pinned under load: partitions an operator
// pinned on one capture (which the balance scheduler, and a plain
// rebalance, leave alone) are evened out by a rebalance plan, in batches,
// exactly once.
func TestRebalanceUnderLoadIsExactlyOnce(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(3)
	c.CreateChangefeed("hot", "gen://?tables=2&keys=100&rate=1000", "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	c.WaitCheckpoint("hot", model.TsFromTime(time.Now()))
	// Pin every partition on one capture.
	const hot = model.NodeID("capture-1")
	for _, r := range c.State().SortedPartitions("hot") {
		if r.Route.Node != hot {
			c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, r.Route.ID, hot, plan.DefaultCosts) })
		}
	}
	rec := c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) {
		return plan.Rebalance(s, "hot", 2, true, plan.DefaultCosts)
	})
	if moves := rec.Plan.PartitionMoves(); moves < 2 || rec.MaxConcurrent(plan.StepMovePartition) > 2 {
		t.Fatalf("rebalance: %d moves, at most %d at once; want at least 2, at most 2 at once", moves, rec.MaxConcurrent(plan.StepMovePartition))
	}
	per := map[model.NodeID]int{}
	for _, r := range c.State().Partitions["hot"] {
		per[r.Route.Node]++
	}
	if len(per) != 3 || max(per["capture-1"], per["capture-2"], per["capture-3"])-min(per["capture-1"], per["capture-2"], per["capture-3"]) > 1 {
		t.Fatalf("after the rebalance: %v", per)
	}
	rep := c.PauseAndVerify("hot")
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after the rebalance: %+v", rep)
	}
	t.Logf("rebalance moved %d partitions: %v; %d events verified, 0 lost, 0 duplicates", rec.Plan.PartitionMoves(), per, rep.Expected)
}
