package maintainer_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A move whose destination dies with the partition in flight (the
// source has handed it over, the destination has not started it), then
// a split of the same partition once it runs again: the split cuts the
// partition where the crash left it, not where the move meant it to be,
// and the sink holds every event (at least once: the dead capture's other
// partitions resume from their checkpoints).
func TestAPartitionWhoseMoveDiedInFlightSplitsWithoutLoss(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		holding string // the partition the destination may not start
		held    = make(chan struct{})
		once    sync.Once
	)
	hold := func(r model.RouteEntry) error {
		mu.Lock()
		h := holding
		mu.Unlock()
		if r.ID == h {
			once.Do(func() { close(held) })
			return errors.New("test: the destination is about to die")
		}
		return nil
	}
	// Every capture refuses to start the held partition while it is
	// held: whichever is the move's destination keeps it in flight.
	faults := map[model.NodeID]capture.Faults{}
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3"} {
		faults[id] = capture.Faults{FailStart: hold}
	}
	fc := newFaultCase(t, 30*time.Second, faults)
	mu.Lock()
	holding = fc.p.ID
	mu.Unlock()
	rec := fc.submitMove()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("the move of %s never reached its destination %s", fc.p.ID, fc.to)
	}
	// The destination dies with the move in flight; the partition may
	// start anywhere from now on.
	fc.c.Crash(fc.to)
	mu.Lock()
	holding = ""
	mu.Unlock()
	fc.c.PlanEnd(rec.ID, 60*time.Second)
	fc.c.Eventually("the partition running again", 60*time.Second, func() bool {
		r := fc.route()
		return r.Status == model.PartitionActive && r.Node != "" && r.Node != fc.to
	})
	// Under the same load, the partition is split.
	p := fc.route()
	key := ""
	for _, k := range []string{"g", "m", "t", "d", "w"} {
		if p.Span.ValidSplitKey(k) == nil {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatalf("no split key inside %s", p.Span)
	}
	split := fc.c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, p.ID, key, plan.DefaultCosts) })
	if split.State != exec.Done {
		t.Fatalf("the split after the crash: %s (%s)", split.State, split.Message)
	}
	halves := 0
	for _, r := range fc.c.State().Partitions["demo"] {
		if r.Route.Span.Table == p.Span.Table && (r.Route.Span.End == key || r.Route.Span.Start == key) {
			halves++
		}
	}
	if halves != 2 {
		t.Fatalf("%d halves of %s split at %q", halves, p.ID, key)
	}
	fc.c.Warm("demo", time.Second)
	if err := fc.cov.Err(); err != nil {
		t.Fatal(err)
	}
	rep := fc.c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 {
		t.Fatalf("after the crash and the split: %+v", rep)
	}
	t.Logf("%d events verified: 0 lost, %d duplicates", rep.Expected, rep.Duplicates)
}
