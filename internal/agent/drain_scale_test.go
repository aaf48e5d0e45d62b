package agent

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The drain issue's scale case: a capture holding many changefeeds and
// thousands of partitions is drained under load in batches of 2.
// CDCCTL_SCALE_FEEDS sets the number of changefeeds, 40 partitions each:
// 50 by default (2,000 partitions), 10 under the race detector, as the
// README's test command runs it. The full size is a measurement
// (docs/benchmarks.md): go test -count=1 -run TestDrainAtScale -v ./internal/agent
func TestDrainAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	feeds := 50
	if raceEnabled {
		feeds = 10
	}
	if v, err := strconv.Atoi(os.Getenv("CDCCTL_SCALE_FEEDS")); err == nil && v > 0 {
		feeds = v
	}
	tc := newTestCluster(t)
	// Thousands of dispatchers can starve a small machine's CPU for longer
	// than the tests' usual 2s session: a lost session restarts every
	// dispatcher of the node, which starves it more. Use the default TTL.
	tc.ttl = 10 * time.Second
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	dir := t.TempDir()
	sinkOf := func(name string) string { return "file://" + dir + "/" + name + "?flush-interval=200ms" }
	began := time.Now()
	for i := range feeds {
		name := fmt.Sprintf("cf%03d", i)
		if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: name, Source: "gen://?tables=10&keys=40&rate=40", Sink: sinkOf(name), PartitionsPerTable: 4}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("created %d changefeeds in %s", feeds, time.Since(began))
	target := tc.followerOf(leader.Node)
	tc.eventually("every partition running", 120*time.Second, func() bool {
		ps, err := c.Partitions(ctx, "", "")
		if err != nil {
			return false
		}
		on := 0
		for _, p := range ps.Partitions {
			if p.Node == "" {
				return false
			}
			if p.Node == string(target) {
				on++
			}
		}
		return len(ps.Partitions) == feeds*40 && on > 0
	})
	t.Logf("placed in %s", time.Since(began))
	began = time.Now()
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	tc.eventually("the drain completes", 600*time.Second, func() bool {
		st, err := c.DrainStatus(ctx, string(target))
		return err == nil && !st.IsDraining && st.Liveness == "Stopping"
	})
	t.Logf("drained in %s", time.Since(began))
	// The plan's record: done, and its maintainer moves never more than
	// the batch at once.
	var rec *api.PlanResponse
	tc.eventually("the drain plan is done", 30*time.Second, func() bool {
		rec, err = c.Plan(ctx, res.PlanID)
		return err == nil && rec.State == exec.Done
	})
	moves, most := rec.Plan.Steps(plan.StepMoveMaintainer), rec.MaxConcurrent(plan.StepMoveMaintainer)
	if moves != res.CurrentMaintainerCount || most > 2 || (moves >= 2 && most != 2) {
		t.Fatalf("plan %s: %d maintainer moves (drain started with %d), at most %d at once; want batches of 2", res.PlanID, moves, res.CurrentMaintainerCount, most)
	}
	t.Logf("plan %s: %d maintainer moves, at most %d at once; %d partitions moved", res.PlanID, moves, most, rec.Plan.PartitionMoves())
	// Pause every changefeed (its checkpoint is then exact) and verify
	// each sink up to its checkpoint.
	for i := range feeds {
		if _, err := c.PauseChangefeed(ctx, fmt.Sprintf("cf%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	var events uint64
	for i := range feeds {
		name := fmt.Sprintf("cf%03d", i)
		rep := tc.verifyPaused(c, name, sinkOf(name), verifyStorage)
		if !rep.OK || rep.Duplicates != 0 {
			t.Fatalf("%s after the drain: %+v", name, rep)
		}
		events += rep.Expected
	}
	t.Logf("verified %d events in %d changefeeds: 0 lost, 0 duplicates", events, feeds)
}
