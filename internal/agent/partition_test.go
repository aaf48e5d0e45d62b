package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// coverageWatch checks the routing table in etcd every 50ms, and at every
// call of check: each table's key space is covered with no gap and no
// overlap. It keeps the first violation.
type coverageWatch struct {
	tc     *testCluster
	cf     model.ChangefeedID
	mu     sync.Mutex
	first  error
	checks int
	stop   chan struct{}
	done   chan struct{}
}

func (tc *testCluster) watchCoverage(cf model.ChangefeedID) *coverageWatch {
	w := &coverageWatch{tc: tc, cf: cf, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
				w.check()
			}
		}
	}()
	tc.t.Cleanup(w.close)
	return w
}

func (w *coverageWatch) check() {
	st, err := w.tc.store.Load(context.Background())
	if err != nil {
		return
	}
	var spans []model.Span
	for _, r := range st.Partitions[w.cf] {
		spans = append(spans, r.Route.Span)
	}
	err = model.CheckCoverage(spans)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	if err != nil && w.first == nil {
		w.first = fmt.Errorf("revision %d: %w", st.Revision, err)
	}
}

func (w *coverageWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
		<-w.done
	}
}

// count is how many times the routing table was checked.
func (w *coverageWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checks
}

// err checks once more and returns the first violation seen.
func (w *coverageWatch) err() error {
	w.check()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// runDemoGen runs the demo changefeed into sink (warm for a second) and
// returns its generator, to pick keys from.
func (tc *testCluster) runDemoGen(c *api.Client, sink string) *gen.Generator {
	tc.t.Helper()
	created, _ := tc.runDemo(c, demoSource, sink, time.Second)
	return tc.generator(created.Source)
}

// generator is the generator behind a changefeed's source URI: what the
// changefeed reads, to pick keys from or to verify against.
func (tc *testCluster) generator(source string) *gen.Generator {
	tc.t.Helper()
	cfg, err := gen.ParseURI(source)
	if err != nil {
		tc.t.Fatal(err)
	}
	g, err := gen.New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	return g
}

// middleKey returns a generator key in the middle of a span, so that
// both halves get keys.
func middleKey(g *gen.Generator, s model.Span) (string, bool) {
	var in []string
	for i := range g.Config().Keys {
		if k := g.Key(i); s.Contains(k) {
			in = append(in, k)
		}
	}
	if len(in) < 2 {
		return "", false
	}
	return in[len(in)/2], true
}

// applyPlan submits a plan computed from the current snapshot and waits
// for its end.
func (tc *testCluster) applyPlan(c *api.Client, compute func(*model.Snapshot) (*plan.Plan, error)) *api.PlanResponse {
	tc.t.Helper()
	ctx := context.Background()
	// A partition the balance scheduler is moving is busy: wait and
	// compute again, as seed 003's clients do with ErrPartitionBusy. A
	// plan that went stale (the scheduler moved something it read) is
	// computed again too, as the refusal tells an operator to.
	var sub *api.PlanResponse
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			tc.t.Fatal(err)
		}
		p, err := compute(&snap.Snapshot)
		if err == nil {
			sub, err = c.SubmitPlan(ctx, api.SubmitPlanRequest{Plan: p, SubmittedBy: "test"})
		}
		if err == nil {
			break
		}
		retry := api.IsCode(apiErr(err), api.CodePartitionBusy) || api.IsCode(apiErr(err), api.CodeStalePlan)
		if !retry || time.Now().After(deadline) {
			tc.t.Fatalf("plan: %v", err)
		}
		tc.t.Logf("plan refused, computing it again: %v", err)
	}
	rec := tc.planEnd(c, sub.ID, 30*time.Second)
	if rec.State != exec.Done {
		tc.t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	return rec
}

// Seed 003 under load: partitions are split and their upper halves moved
// to another capture, again and again, while the demo changefeed runs.
// The routing table covers every table's key space at every moment we
// look, and the sink ends up with every event exactly once, in per-key
// order.
func TestSplitsAndMovesUnderLoadAreExactlyOnce(t *testing.T) {
	t.Parallel()
	rounds := 6
	if raceEnabled {
		rounds = 4
	}
	splitsAndMoves(t, newTestCluster(t), rounds)
}

// The same with the partitions' states in a bucket (--checkpoint-store
// file://…) instead of etcd: the halves' states are there, cut at the key.
func TestSplitsAndMovesWithStatesInABucket(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	dir := t.TempDir()
	tc.checkpointStore = "file://" + dir
	splitsAndMoves(t, tc, 2)
	b, err := checkpoint.OpenBlob(context.Background(), tc.checkpointStore, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, r := range tc.state().Partitions["demo"] {
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
	statesDir := filepath.Join(dir, "test", "demo")
	if n := countFiles(t, statesDir); n == 0 {
		t.Fatalf("no states in %s before the removal", statesDir)
	}
	if _, err := tc.client().RemoveChangefeed(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
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

func splitsAndMoves(t *testing.T, tc *testCluster, rounds int) {
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	g := tc.runDemoGen(c, sink)
	cov := tc.watchCoverage("demo")
	var notes []string
	history := map[string]string{} // partition → what its history must say
	for round := range rounds {
		// A partition of a different table each round.
		table := g.TableNames()[round%len(g.TableNames())]
		var victim model.RouteEntry
		for _, r := range tc.state().SortedPartitions("demo") {
			if r.Route.Span.Table == table && r.Route.Status == model.PartitionActive {
				victim = r.Route
				break
			}
		}
		key, ok := middleKey(g, victim.Span)
		if !ok {
			t.Fatalf("%s %s has fewer than 2 keys", victim.ID, victim.Span)
		}
		split := tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, victim.ID, key, plan.DefaultCosts) })
		notes = append(notes, split.Steps[0].Note)
		if err := cov.err(); err != nil {
			t.Fatalf("after splitting %s at %q: %v", victim.ID, key, err)
		}
		var upper model.RouteEntry
		for _, r := range tc.state().Partitions["demo"] {
			if r.Route.Span.Table == table && r.Route.Span.Start == key {
				upper = r.Route
			}
		}
		if upper.ID == "" || upper.Node != victim.Node {
			t.Fatalf("no upper half of %s at %q on %s: %+v", victim.ID, key, victim.Node, upper)
		}
		to := tc.followerOf(upper.Node)
		move := tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, upper.ID, to, plan.DefaultCosts) })
		notes = append(notes, upper.ID+" "+move.Steps[0].Note)
		if err := cov.err(); err != nil {
			t.Fatalf("after moving %s to %s: %v", upper.ID, to, err)
		}
		history[victim.ID] = fmt.Sprintf("split at %q: upper half %s", key, upper.ID)
		history[upper.ID] = "moved"
		if r := tc.state().Partitions["demo"][upper.ID].Route; r.Node != to || !r.Pinned {
			t.Fatalf("%s is on %s (pinned %v), want pinned on %s", upper.ID, r.Node, r.Pinned, to)
		}
	}
	// The operations show in the partitions' history.
	for id, want := range history {
		p, err := c.Partition(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, ev := range p.History {
			kinds = append(kinds, ev.Kind+" "+ev.Detail)
		}
		if got := strings.Join(kinds, "; "); !strings.Contains(got, want) {
			t.Errorf("history of %s: %q, want %q in it", id, got, want)
		}
	}
	rep := tc.pauseAndVerify(c, "demo", sink, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after %d splits and moves: %+v", rounds, rep)
	}
	if err := cov.err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d splits and moves; coverage held in %d checks; %d events verified, 0 lost, 0 duplicates\n%s", rounds, cov.count(), rep.Expected, strings.Join(notes, "\n"))
}

// partition rebalance --move-pinned under load: partitions an operator
// pinned on one capture (which the balance scheduler, and a plain
// rebalance, leave alone) are evened out by a rebalance plan, in batches,
// exactly once.
func TestRebalanceUnderLoadIsExactlyOnce(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "hot", Source: "gen://?tables=2&keys=100&rate=1000", Sink: sink, PartitionsPerTable: 4}); err != nil {
		t.Fatal(err)
	}
	tc.waitCheckpoint(c, "hot", model.TsFromTime(time.Now()))
	// Pin every partition on one capture.
	const hot = model.NodeID("capture-1")
	for _, r := range tc.state().SortedPartitions("hot") {
		if r.Route.Node != hot {
			tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, r.Route.ID, hot, plan.DefaultCosts) })
		}
	}
	rec := tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) {
		return plan.Rebalance(s, "hot", 2, true, plan.DefaultCosts)
	})
	if moves := rec.Plan.PartitionMoves(); moves < 2 || rec.MaxConcurrent(plan.StepMovePartition) > 2 {
		t.Fatalf("rebalance: %d moves, at most %d at once; want at least 2, at most 2 at once", moves, rec.MaxConcurrent(plan.StepMovePartition))
	}
	per := map[model.NodeID]int{}
	for _, r := range tc.state().Partitions["hot"] {
		per[r.Route.Node]++
	}
	if len(per) != 3 || max(per["capture-1"], per["capture-2"], per["capture-3"])-min(per["capture-1"], per["capture-2"], per["capture-3"]) > 1 {
		t.Fatalf("after the rebalance: %v", per)
	}
	rep := tc.pauseAndVerify(c, "hot", sink, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after the rebalance: %+v", rep)
	}
	t.Logf("rebalance moved %d partitions: %v; %d events verified, 0 lost, 0 duplicates", rec.Plan.PartitionMoves(), per, rep.Expected)
}
