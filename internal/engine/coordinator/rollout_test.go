package coordinator_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A rolling restart under load (cdcctl rollout restart): every capture
// restarts once, as a new incarnation; the coordinator's capture goes
// last and hands the role over before it is asked to restart; each
// capture is given work again; and the sinks hold every event in per-key
// order, none twice (every move was graceful).
func TestARolloutRestartsEveryCaptureOnceAndLosesNothing(t *testing.T) {
	t.Parallel()
	c, leader, before := rolloutCluster(t, 3)
	rec := submitRollout(t, c, false)
	if got := rec.Plan.RolloutCaptures(); len(got) != 3 || got[2] != leader {
		t.Fatalf("the rollout restarts %v; want all three, the coordinator %s last", got, leader)
	}
	done := c.PlanEnd(rec.ID, 4*time.Minute)
	if done.State != exec.Done {
		t.Fatalf("rollout %s: %s (%s)", done.ID, done.State, done.Message)
	}

	st := c.State()
	for id, inc := range before {
		e, ok := st.Nodes[id]
		if !ok || e.Info.Incarnation == inc || st.LivenessOf(id) != model.LivenessAlive {
			t.Errorf("%s after the rollout: registered %v, incarnation %x (was %x), %s", id, ok, e.Info.Incarnation, inc, st.LivenessOf(id))
		}
		if n := c.Restarts(id); n != 1 {
			t.Errorf("%s restarted %d times; want once", id, n)
		}
	}
	if now, ok := st.Leader(); !ok || now.Node == leader {
		t.Errorf("the coordinator after the rollout is %v (%v); want another than %s, which handed the role over", now.Node, ok, leader)
	}
	var resigned, asked *time.Time
	for _, s := range done.Steps {
		switch step := done.Step(s); {
		case step.Kind == plan.StepResign && step.To == leader:
			resigned = s.Ended
		case step.Kind == plan.StepRestart && step.To == leader:
			asked = s.Started
		}
	}
	if resigned == nil || asked == nil || asked.Before(*resigned) {
		t.Errorf("%s was asked to restart at %v, the role handed over at %v; want the role moved first", leader, asked, resigned)
	}
	if len(st.Restarts) != 0 {
		t.Errorf("restart requests left after the rollout: %+v", st.Restarts)
	}
	for id := range before {
		if n := partitionsOn(c, id); n == 0 {
			t.Errorf("%s holds no partition after the rollout; each capture is given work again", id)
		}
	}
	c.VerifyAll(true)
}

// A rolling upgrade (cdcctl rollout upgrade --exec): the plan drains
// each capture and then waits for its hook — here the test, stopping the
// capture gracefully and starting it again as a service manager would
// with a new version — without asking the capture to exit; every capture
// is restarted once, by the hook, and the sinks hold every event once.
func TestARolloutUpgradeWaitsForItsHookToRestartEachCapture(t *testing.T) {
	t.Parallel()
	c, leader, before := rolloutCluster(t, 2)
	rec := submitRollout(t, c, true)
	if rec.Plan.RestartBy != plan.RestartByHook {
		t.Fatalf("submitted %+v; want its restarts the hook's", rec.Plan)
	}
	hooked := map[model.NodeID]int{}
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		cur := c.Plan(rec.ID)
		if cur.State.Terminal() {
			rec = cur
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upgrade did not end: %+v", cur.Steps)
		}
		for _, s := range cur.Steps {
			step := cur.Step(s)
			if step.Kind != plan.StepRestart || s.State != exec.StepRunning || hooked[step.To] > 0 {
				continue
			}
			// Waiting for the hook, the capture does not exit by itself.
			time.Sleep(500 * time.Millisecond)
			if e, ok := c.State().Nodes[step.To]; !ok || e.Info.Incarnation != before[step.To] || c.Restarts(step.To) != 0 {
				t.Fatalf("%s left or restarted by itself while the plan waited for the hook", step.To)
			}
			hooked[step.To]++
			if err := c.Stop(step.To); err != nil {
				t.Fatalf("the hook's stop of %s: %v", step.To, err)
			}
			c.Start(string(step.To))
		}
	}
	if rec.State != exec.Done {
		t.Fatalf("upgrade %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	st := c.State()
	for id, inc := range before {
		if e, ok := st.Nodes[id]; !ok || e.Info.Incarnation == inc || hooked[id] != 1 || c.Restarts(id) != 0 {
			t.Errorf("%s after the upgrade: registered %v, incarnation changed %v, hooked %d times, restarted by itself %d times; want a new incarnation by one hook",
				id, ok, e.Info.Incarnation != inc, hooked[id], c.Restarts(id))
		}
	}
	if now, ok := st.Leader(); !ok || now.Node == leader {
		t.Errorf("the coordinator after the upgrade is %v (%v); want another than %s", now.Node, ok, leader)
	}
	if len(st.Restarts) != 0 {
		t.Errorf("restart requests left after the upgrade: %+v", st.Restarts)
	}
	c.VerifyAll(true)
}

// rolloutCluster starts three captures running feeds warmed changefeeds
// and returns them with the coordinator's capture and each capture's
// incarnation before the rollout.
func rolloutCluster(t *testing.T, feeds int) (*enginetest.Cluster, model.NodeID, map[model.NodeID]int64) {
	t.Helper()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	for _, id := range c.Feeds(feeds) {
		c.Warm(id, time.Second)
	}
	before := map[model.NodeID]int64{}
	for id, e := range c.State().Nodes {
		before[id] = e.Info.Incarnation
	}
	return c, leader, before
}

// submitRollout computes a rollout of every capture (its restarts the
// hook's with byHook) and submits it, computing it again while the
// balance scheduler makes it stale.
func submitRollout(t testing.TB, c *enginetest.Cluster, byHook bool) *exec.Record {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		snap := coordinator.Snapshot(c.State())
		p, err := plan.Rollout(&snap, nil, 2, plan.DefaultCosts)
		if err != nil {
			t.Fatal(err)
		}
		if byHook {
			p.ByHook()
		}
		rec, err := c.Submit(p, false)
		var stale *plan.StaleError
		if err == nil {
			return rec
		}
		if !errors.As(err, &stale) || time.Now().After(deadline) {
			t.Fatalf("submit the rollout: %v", err)
		}
	}
}

// BenchmarkRolloutAgainstARestartLoop measures a rolling restart as a
// plan against the hand loop it replaces (stop a capture gracefully,
// start it, wait until it has its share of work again, the next; the
// coordinator's last), each on a cluster of its own (three captures,
// four changefeeds), in alternating order from one iteration to the
// next. It reports each one's total time, the changefeeds' worst lag p99
// while it ran, their ratios (rollout / loop), and the duplicates each
// left in the sinks: the rollout must leave none and lose nothing (the
// loop must lose nothing; what it writes twice is counted). Run it with
//
//	go test -run '^$' -bench RolloutAgainstARestartLoop -benchtime 4x ./internal/engine/coordinator
func BenchmarkRolloutAgainstARestartLoop(b *testing.B) {
	var rolloutTook, loopTook, rolloutLag, loopLag []time.Duration
	rolloutDups, loopDups := 0, 0
	loaded := func() (*enginetest.Cluster, []model.ChangefeedID) {
		c := enginetest.New(b, enginetest.Options{FeedRate: 200}) // the load docs/benchmarks.md measured under
		c.StartCaptures(3)
		feeds := c.Feeds(4)
		for _, id := range feeds {
			c.Warm(id, time.Second)
		}
		return c, feeds
	}
	// verified pauses every changefeed and returns the duplicates their
	// sinks hold; anything lost fails the benchmark.
	verified := func(c *enginetest.Cluster, feeds []model.ChangefeedID, what string) int {
		for _, id := range feeds {
			c.SetState(id, model.ChangefeedPaused)
		}
		time.Sleep(2 * time.Second)
		dups := 0
		for _, id := range feeds {
			rep := c.VerifyPaused(id)
			if !rep.OK || rep.Lost != 0 {
				b.Fatalf("%s: %s: %+v", what, id, rep)
			}
			dups += int(rep.Duplicates)
		}
		c.StopAll()
		return dups
	}
	rollout := func() {
		c, feeds := loaded()
		s := sampleLag(c, feeds)
		began := time.Now()
		rec := submitRollout(b, c, false)
		if done := c.PlanEnd(rec.ID, 4*time.Minute); done.State != exec.Done {
			s.end()
			b.Fatalf("rollout: %s (%s)", done.State, done.Message)
		}
		rolloutTook = append(rolloutTook, time.Since(began))
		rolloutLag = append(rolloutLag, quantile(s.end(), 0.99))
		if n := verified(c, feeds, "rollout"); n != 0 {
			b.Fatalf("the rollout wrote %d events twice; a graceful one writes none", n)
		}
	}
	loop := func() {
		c, feeds := loaded()
		leader := c.WaitLeader().Node
		s := sampleLag(c, feeds)
		began := time.Now()
		var order []model.NodeID
		for _, id := range c.IDs() {
			if id != leader {
				order = append(order, id)
			}
		}
		for _, id := range append(order, leader) {
			if err := c.Stop(id); err != nil {
				b.Fatalf("stop %s: %v", id, err)
			}
			c.Start(string(id))
			c.Eventually(string(id)+" has its share of work again", 2*time.Minute, func() bool { return hasShare(c.State(), id) })
		}
		loopTook = append(loopTook, time.Since(began))
		loopLag = append(loopLag, quantile(s.end(), 0.99))
		loopDups += verified(c, feeds, "restart loop")
	}
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			rollout()
			loop()
		} else {
			loop()
			rollout()
		}
	}
	for _, d := range [][]time.Duration{rolloutTook, loopTook, rolloutLag, loopLag} {
		slices.Sort(d)
	}
	rt, lt, rl, ll := quantile(rolloutTook, 0.5), quantile(loopTook, 0.5), quantile(rolloutLag, 0.5), quantile(loopLag, 0.5)
	b.ReportMetric(rt.Seconds(), "rollout-s")
	b.ReportMetric(lt.Seconds(), "loop-s")
	b.ReportMetric(rt.Seconds()/lt.Seconds(), "time-ratio")
	b.ReportMetric(rl.Seconds(), "p99-lag-rollout-s")
	b.ReportMetric(ll.Seconds(), "p99-lag-loop-s")
	b.ReportMetric(rl.Seconds()/ll.Seconds(), "lag-ratio")
	b.ReportMetric(float64(rolloutDups)/float64(b.N), "dups-rollout/op")
	b.ReportMetric(float64(loopDups)/float64(b.N), "dups-loop/op")
	b.Logf("took: rollout %v, loop %v; lag p99: rollout %v, loop %v; duplicates: rollout %d, loop %d", rolloutTook, loopTook, rolloutLag, loopLag, rolloutDups, loopDups)
}

// hasShare: no changefeed has a capture holding more than one more of
// its partitions than id (the balance scheduler's rule), and id is
// registered Alive.
func hasShare(st *meta.State, id model.NodeID) bool {
	if _, ok := st.Nodes[id]; !ok || st.LivenessOf(id) != model.LivenessAlive {
		return false
	}
	for _, cf := range st.ChangefeedIDs() {
		counts := map[model.NodeID]int{}
		for _, r := range st.Partitions[cf] {
			if r.Route.Status == model.PartitionActive {
				counts[r.Route.Node]++
			}
		}
		for _, n := range counts {
			if n-counts[id] > 1 {
				return false
			}
		}
	}
	return true
}
