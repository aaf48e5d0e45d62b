package agent

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The drain issue's scale case: a capture holding many changefeeds and
// thousands of partitions is drained under load in batches.
// CDCCTL_SCALE_FEEDS sets the number of changefeeds (50 by default, 4
// under the race detector, as the README's test command runs it: 160
// partitions, of which a third drained),
// CDCCTL_SCALE_TABLES their tables (10, 4 partitions each),
// CDCCTL_SCALE_RATE each one's changes a second (40) and
// CDCCTL_SCALE_BATCH the batch (2). The full sizes are measurements
// (docs/benchmarks.md), for example:
//
//	go test -count=1 -run TestDrainAtScale -v -timeout 30m ./internal/agent
//
// It reports the checkpoint lag during the drain against the lag of the
// same cluster just before it (the baseline), as a ratio.
func TestDrainAtScale(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("scale test")
	}
	feeds, tables, batch, rate := 50, 10, 2, 40
	if raceEnabled {
		feeds = 4
	}
	setInt := func(env string, v *int) {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*v = n
		}
	}
	setInt("CDCCTL_SCALE_FEEDS", &feeds)
	setInt("CDCCTL_SCALE_TABLES", &tables)
	setInt("CDCCTL_SCALE_BATCH", &batch)
	setInt("CDCCTL_SCALE_RATE", &rate)
	// CDCCTL_SCALE_BUDGET=D: a fourth capture, and a second drain under a
	// lag budget of max lag D (resume below half of it), the two drains'
	// lag compared (CDCCTL_SCALE_BUDGET_FIRST: the budgeted one first).
	var budget *api.LagBudget
	captures := 3
	if d := os.Getenv("CDCCTL_SCALE_BUDGET"); d != "" {
		budget, captures = &api.LagBudget{MaxLag: d}, 4
	}
	verified := feeds
	setInt("CDCCTL_SCALE_VERIFY", &verified)
	parts := tables * 4
	tc := newTestCluster(t)
	// Thousands of dispatchers can starve a small machine's CPU for longer
	// than the tests' usual 2s session: a lost session restarts every
	// dispatcher of the node, which starves it more. Use the default TTL.
	tc.ttl = 10 * time.Second
	leader := tc.startCaptures(captures)
	// A loaded cluster answers slowly; the usual 10s would give up.
	c := tc.clientWithTimeout(time.Minute)
	ctx := context.Background()
	dir := t.TempDir()
	sinkOf := func(name string) string { return "file://" + dir + "/" + name + "?flush-interval=200ms" }
	began := time.Now()
	for i := range feeds {
		name := fmt.Sprintf("cf%03d", i)
		if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: name, Source: fmt.Sprintf("gen://?tables=%d&keys=40&rate=%d", tables, rate), Sink: sinkOf(name), PartitionsPerTable: 4}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("created %d changefeeds in %s", feeds, time.Since(began))
	target := tc.followerOf(leader.Node)
	tc.eventuallyEvery("every partition running", time.Duration(feeds*parts/10+120)*time.Second, time.Second, func() bool {
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
		return len(ps.Partitions) == feeds*parts && on > 0
	})
	t.Logf("placed in %s", time.Since(began))
	warm := model.TsFromTime(time.Now())
	defer func() {
		if t.Failed() {
			l := sampleLag(t, c, time.Second, nil)
			t.Logf("failed; the checkpoint lag then: p50 %s, p99 %s", l.p(50), l.p(99))
		}
	}()
	tc.eventuallyEvery("every checkpoint past the placement", time.Duration(feeds+60)*time.Second, time.Second, func() bool {
		l, err := c.Changefeeds(ctx)
		if err != nil {
			return false
		}
		for _, cf := range l.Changefeeds {
			if model.Ts(cf.CheckpointTs) < warm {
				return false
			}
		}
		return true
	})
	t.Logf("warm after %s", time.Since(began))
	profileCPU(t, os.Getenv("CDCCTL_SCALE_CPUPROFILE"), "steady", 20*time.Second)
	if budget == nil {
		drainAtScale(t, tc, c, target, batch, nil)
	} else {
		// A drain with and one without the lag budget, each of its own
		// follower, in the order asked; each against the lag just before
		// it.
		second := model.NodeID("")
		for id := range tc.nodes {
			if id != leader.Node && id != target {
				second = id
				break
			}
		}
		first, then := budget, (*api.LagBudget)(nil)
		if os.Getenv("CDCCTL_SCALE_BUDGET_FIRST") == "" {
			first, then = nil, budget
		}
		a := drainAtScale(t, tc, c, target, batch, first)
		b := drainAtScale(t, tc, c, second, batch, then)
		with, without := a, b
		if first == nil {
			with, without = b, a
		}
		t.Logf("lag budget %s: drain p99 %s under it (%d holds, drained in %s), %s without (drained in %s); ratio %.2f",
			budget.MaxLag, with.during.p(99), with.holds, with.took.Round(time.Second), without.during.p(99), without.took.Round(time.Second),
			float64(with.during.p(99))/float64(max(without.during.p(99), time.Millisecond)))
	}
	// Pause every changefeed (its checkpoint is then exact) and verify
	// each sink up to its checkpoint.
	for i := range feeds {
		if _, err := c.PauseChangefeed(ctx, fmt.Sprintf("cf%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	var events uint64
	for i := range verified {
		name := fmt.Sprintf("cf%03d", i)
		rep := tc.verifyPaused(c, name, sinkOf(name), verifyStorage)
		if !rep.OK || rep.Duplicates != 0 {
			t.Fatalf("%s after the drain: %+v", name, rep)
		}
		events += rep.Expected
	}
	t.Logf("verified %d events in %d changefeeds: 0 lost, 0 duplicates", events, verified)
}

// drainResult is what drainAtScale measured.
type drainResult struct {
	took           time.Duration
	before, during lags
	holds          int
}

// drainAtScale drains target under budget (nil: none), sampling the lag
// for 10 s before it and while it runs, and checks its plan: done, its
// maintainer moves never more than the batch at once.
func drainAtScale(t *testing.T, tc *testCluster, c *api.Client, target model.NodeID, batch int, budget *api.LagBudget) drainResult {
	t.Helper()
	ctx := context.Background()
	// The baseline: checkpoint lag of the same cluster, same load, for
	// 10s before the drain.
	baseline := sampleLag(t, c, 10*time.Second, nil)
	began := time.Now()
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: batch, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	lastLog := time.Now()
	drained := func() bool {
		st, err := c.DrainStatus(ctx, string(target))
		if err == nil && time.Since(lastLog) > 15*time.Second {
			// Progress, for runs that take minutes.
			left := 0
			for _, n := range st.RemainingDispatcherCount {
				left += n
			}
			t.Logf("after %s: %d maintainers and %d partitions left on %s; %s", time.Since(began).Round(time.Second), st.RemainingMaintainerCount, left, target, tc.handoverCensus(target))
			lastLog = time.Now()
		}
		return err == nil && !st.IsDraining && st.Liveness == "Stopping"
	}
	go profileCPU(t, os.Getenv("CDCCTL_SCALE_CPUPROFILE"), "drain-"+string(target), 20*time.Second)
	during, samples := sampleLagOf(t, c, 30*time.Minute, drained)
	if f := os.Getenv("CDCCTL_SCALE_DUMP"); f != "" {
		// Every sample, for a look at how the lag moved (drain-scale.sh DUMP=1).
		var b strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&b, "%d %s %d %d\n", s.at.Sub(began).Milliseconds(), s.changefeed, s.lag.Milliseconds(), s.epoch)
		}
		_ = os.WriteFile(f, []byte(b.String()), 0o644)
	}
	tc.eventuallyEvery("the drain completes", 60*time.Second, time.Second, drained)
	took := time.Since(began)
	t.Logf("drained %s in %s (budget %+v)", target, took, budget)
	t.Logf("checkpoint lag p50/p99/max: before the drain %s/%s/%s, during it %s/%s/%s; p99 ratio during/before %.2f",
		baseline.p(50), baseline.p(99), baseline.p(100), during.p(50), during.p(99), during.p(100), float64(during.p(99))/float64(max(baseline.p(99), time.Millisecond)))
	t.Logf("checkpoint lag during the drain: %s", lagAttribution(during, samples))
	// The plan's record: done, and its maintainer moves never more than
	// the batch at once.
	var rec *api.PlanResponse
	tc.eventually("the drain plan is done", 30*time.Second, func() bool {
		rec, err = c.Plan(ctx, res.PlanID)
		return err == nil && rec.State == exec.Done
	})
	// (A budget's holds halve the steps at once: then fewer is right.)
	moves, most := rec.Plan.Steps(plan.StepMoveMaintainer), rec.Record().MaxConcurrent(plan.StepMoveMaintainer)
	if moves != res.CurrentMaintainerCount || most > batch || (moves >= batch && most != batch && budget == nil) {
		t.Fatalf("plan %s: %d maintainer moves (drain started with %d), at most %d at once; want batches of %d", res.PlanID, moves, res.CurrentMaintainerCount, most, batch)
	}
	holds := 0
	for _, ev := range rec.Record().Log {
		if ev.Type == exec.EventHeld {
			holds++
		}
	}
	// How long the maintainers' batches took, from the first one's start
	// to the last one's end: they come before the partitions move.
	var first, last time.Time
	for _, ss := range rec.Record().Steps {
		if rec.Plan.Batches[ss.Batch].Steps[ss.Index].Kind != plan.StepMoveMaintainer || ss.Started == nil || ss.Ended == nil {
			continue
		}
		if first.IsZero() || ss.Started.Before(first) {
			first = *ss.Started
		}
		if ss.Ended.After(last) {
			last = *ss.Ended
		}
	}
	t.Logf("plan %s: %d maintainer moves, at most %d at once, in %s; %d partitions moved; %d holds in its log", res.PlanID, moves, most, last.Sub(first).Round(time.Millisecond), rec.Plan.PartitionMoves(), holds)
	return drainResult{took: took, before: baseline, during: during, holds: holds}
}

// lags are checkpoint lags (wall clock minus checkpoint), one per
// changefeed per sample.
type lags []time.Duration

func (l lags) p(q int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*q/100)].Round(time.Millisecond)
}

// sampleLag reads every changefeed's checkpoint every 500ms, for d or
// until done says so.
func sampleLag(t *testing.T, c *api.Client, d time.Duration, done func() bool) lags {
	t.Helper()
	l, _ := sampleLagOf(t, c, d, done)
	return l
}

// lagSample is one changefeed's lag in one sample, with its maintainer's
// placement then.
type lagSample struct {
	changefeed string
	at         time.Time
	lag        time.Duration
	epoch      uint64
}

// sampleLagOf is sampleLag, with each sample's changefeed and maintainer.
func sampleLagOf(t *testing.T, c *api.Client, d time.Duration, done func() bool) (lags, []lagSample) {
	t.Helper()
	var out lags
	var samples []lagSample
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if done != nil && done() {
			break
		}
		l, err := c.Changefeeds(context.Background())
		if err != nil {
			continue
		}
		now := time.Now()
		for _, cf := range l.Changefeeds {
			if cf.CheckpointTs != 0 {
				lag := now.Sub(model.Ts(cf.CheckpointTs).Time())
				out = append(out, lag)
				samples = append(samples, lagSample{changefeed: cf.ID, at: now, lag: lag, epoch: cf.MaintainerEpoch})
			}
		}
	}
	return out, samples
}

// lagAttribution says how much of a drain's worst lag came from
// changefeeds whose maintainer had just moved: of the samples at or above
// the p99, those taken within 3 s of the first sample that showed the
// changefeed's new maintainer; and the p99 of the changefeeds whose
// maintainer moved against those whose did not.
func lagAttribution(during lags, samples []lagSample) string {
	p99 := during.p(99)
	movedAt := map[string]time.Time{}
	first := map[string]uint64{}
	for _, s := range samples {
		e, seen := first[s.changefeed]
		if !seen {
			first[s.changefeed] = s.epoch
		} else if s.epoch != e && movedAt[s.changefeed].IsZero() {
			movedAt[s.changefeed] = s.at
		}
	}
	top, afterMove := 0, 0
	var moved, stayed lags
	for _, s := range samples {
		at, ok := movedAt[s.changefeed]
		if ok {
			moved = append(moved, s.lag)
		} else {
			stayed = append(stayed, s.lag)
		}
		if s.lag.Round(time.Millisecond) < p99 {
			continue
		}
		top++
		if ok && !s.at.Before(at) && s.at.Sub(at) < 3*time.Second {
			afterMove++
		}
	}
	return fmt.Sprintf("%d of the %d samples at or above the p99 within 3 s of their maintainer's move; p99 of the %d changefeeds whose maintainer moved %s, of the others %s",
		afterMove, top, len(movedAt), moved.p(99), stayed.p(99))
}

// handoverCensus says where the partitions of a drain are, from etcd and
// from the dispatcher managers: still on the target, being moved (and
// whether the target's final position is persisted yet), placed on
// another capture, and how many dispatchers actually run there. A slow
// drain shows here which stage of the hand-over it waits in.
func (tc *testCluster) handoverCensus(target model.NodeID) string {
	st := tc.state()
	var onTarget, moving, finalPersisted, placed int
	for _, id := range st.ChangefeedIDs() {
		for pid, r := range st.Partitions[id] {
			switch {
			case r.Route.Status == model.PartitionDraining:
				moving++
				p := st.Progress[id][pid].Progress
				if p.Final && p.Handover && p.Epoch == r.Route.Epoch {
					finalPersisted++
				}
			case r.Route.Node == target:
				onTarget++
			case r.Route.Node != "":
				placed++
			}
		}
	}
	running := 0
	for id, rn := range tc.nodes {
		if id == target {
			continue
		}
		if _, inc := rn.node.current(); inc != nil {
			for _, n := range inc.Manager.Running() {
				running += n
			}
		}
	}
	return fmt.Sprintf("%d on the target, %d moving (%d with a persisted final position), %d placed elsewhere, %d running elsewhere",
		onTarget, moving, finalPersisted, placed, running)
}

// profileCPU writes a CPU profile of the next d to PREFIX-NAME.pprof when
// prefix is set (CDCCTL_SCALE_CPUPROFILE): where a run at scale spends
// its time, steady and while draining. It may run in its own goroutine.
func profileCPU(t *testing.T, prefix, name string, d time.Duration) {
	if prefix == "" {
		return
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		t.Errorf("CPU profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Logf("no CPU profile: %v", err)
		return
	}
	time.Sleep(d)
	pprof.StopCPUProfile()
	t.Logf("CPU profile of %s: %s", name, f.Name())
}
