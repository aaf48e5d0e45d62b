package maintainer_test

import (
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Seed 003's failure-recovery table, one test per row, each with the
// fault injected where the seed puts it (engine hooks or a cut link, not
// sleeps). Each ends with a routing table that covers every key once and
// a sink that holds every event exactly once.

// faultCase is a running demo changefeed and the partition to move.
type faultCase struct {
	c          *enginetest.Cluster
	cov        *enginetest.Coverage
	p          model.RouteEntry // the partition
	maintainer model.NodeID     // demo's maintainer
	to         model.NodeID     // where the move goes
}

// newFaultCase starts 3 captures with the given faults and the demo
// changefeed under load, and picks a partition that is not on demo's
// maintainer's capture and a target that is neither.
func newFaultCase(t *testing.T, moveTimeout time.Duration, faults map[model.NodeID]capture.Faults) *faultCase {
	c := enginetest.New(t, enginetest.Options{MoveTimeout: moveTimeout, Faults: faults})
	c.StartCaptures(3)
	c.CreateChangefeed("demo", demoSource, "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	c.Warm("demo", time.Second)
	fc := &faultCase{c: c, cov: enginetest.WatchCoverage(t, c.Store, "demo")}
	st := c.State()
	fc.maintainer = st.Changefeeds["demo"].Maintainer.Node
	for _, r := range st.SortedPartitions("demo") {
		if r.Route.Node != fc.maintainer && r.Route.Status == model.PartitionActive {
			fc.p = r.Route
			break
		}
	}
	for _, id := range c.IDs() {
		if id != fc.maintainer && id != fc.p.Node {
			fc.to = id
		}
	}
	if fc.p.ID == "" || fc.to == "" {
		t.Fatalf("no partition off the maintainer %s, or no third capture", fc.maintainer)
	}
	return fc
}

// submitMove submits the move.
func (fc *faultCase) submitMove() *exec.Record {
	fc.c.T.Helper()
	snap := fc.c.State().Snapshot()
	p, err := plan.Move(&snap, fc.p.ID, fc.to, plan.DefaultCosts)
	if err != nil {
		fc.c.T.Fatal(err)
	}
	rec, err := fc.c.Submit(p, false)
	if err != nil {
		fc.c.T.Fatal(err)
	}
	return rec
}

// move submits the move and waits for the plan's end.
func (fc *faultCase) move() *exec.Record {
	fc.c.T.Helper()
	return fc.c.PlanEnd(fc.submitMove().ID, 30*time.Second)
}

// finish checks the routing table and the sink.
func (fc *faultCase) finish() {
	fc.c.T.Helper()
	if err := fc.cov.Err(); err != nil {
		fc.c.T.Fatal(err)
	}
	rep := fc.c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		fc.c.T.Fatalf("after the fault: %+v", rep)
	}
	fc.c.T.Logf("%d events verified: 0 lost, 0 duplicates; coverage held in %d checks", rep.Expected, fc.cov.Count())
}

func (fc *faultCase) route() model.RouteEntry {
	return fc.c.State().Partitions["demo"][fc.p.ID].Route
}

// Row 1, failure before ExecuteMigrateOut: the source never reports that
// it gave the partition up (its link to the maintainer is cut). After
// --move-timeout the routing entry goes back to Active on the source,
// which resumes exactly where it stopped; the plan fails saying so.
func TestMoveRevertedWhenTheSourceNeverHandsOver(t *testing.T) {
	t.Parallel()
	fc := newFaultCase(t, 2*time.Second, nil)
	fc.c.Hub.Cut(fc.p.Node, fc.maintainer)
	rec := fc.move()
	fc.c.Hub.Heal(fc.p.Node, fc.maintainer)
	if rec.State != exec.Failed || !strings.Contains(rec.Message, "returned to "+string(fc.p.Node)) || !strings.Contains(rec.Message, "gave no final position within 2s") {
		t.Fatalf("plan %s: %s (%s), want failed: returned to %s", rec.ID, rec.State, rec.Message, fc.p.Node)
	}
	if r := fc.route(); r.Node != fc.p.Node || r.Status != model.PartitionActive || r.Pinned {
		t.Fatalf("%s after the revert: %+v", fc.p.ID, r)
	}
	fc.finish()
}

// Row 2, PreparePartition fails: the target cannot start the partition.
// After MaxStartFailures reports the partition goes back to its source,
// exactly where the source handed it over (the target wrote nothing).
func TestMoveGivenBackWhenTheTargetCannotStartIt(t *testing.T) {
	t.Parallel()
	// victim is "partition@capture": only the move's target fails it (the
	// source's restart must succeed).
	var victim atomic.Value
	victim.Store("")
	faults := map[model.NodeID]capture.Faults{}
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3"} {
		faults[id] = capture.Faults{FailStart: func(r model.RouteEntry) error {
			if r.ID+"@"+string(id) == victim.Load().(string) {
				return errors.New("injected: cannot open the partition")
			}
			return nil
		}}
	}
	fc := newFaultCase(t, 0, faults)
	victim.Store(fc.p.ID + "@" + string(fc.to))
	rec := fc.move()
	if rec.State != exec.Failed || !strings.Contains(rec.Message, "returned to "+string(fc.p.Node)) || !regexp.MustCompile(`could not start it \d+ times \(injected`).MatchString(rec.Message) {
		t.Fatalf("plan %s: %s (%s), want failed: returned to %s", rec.ID, rec.State, rec.Message, fc.p.Node)
	}
	if r := fc.route(); r.Node != fc.p.Node || r.Status != model.PartitionActive {
		t.Fatalf("%s after the give-back: %+v", fc.p.ID, r)
	}
	fc.finish()
}

// Row 3, the etcd write of the new placement fails: it is retried until
// it lands; the move completes exactly once.
func TestMovePlacementWriteIsRetried(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	var victim atomic.Value
	victim.Store("")
	fail := capture.Faults{FailPlace: func(r model.RouteEntry) error {
		if r.ID == victim.Load().(string) && failures.Add(1) <= 3 {
			return errors.New("injected: etcd write failed")
		}
		return nil
	}}
	fc := newFaultCase(t, 0, map[model.NodeID]capture.Faults{"capture-1": fail, "capture-2": fail, "capture-3": fail})
	victim.Store(fc.p.ID)
	rec := fc.move()
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	if n := failures.Load(); n < 4 {
		t.Fatalf("the placement was tried %d times; want 3 injected failures, then success", n)
	}
	if r := fc.route(); r.Node != fc.to || r.Status != model.PartitionActive {
		t.Fatalf("%s after the retries: %+v", fc.p.ID, r)
	}
	fc.finish()
}

// Seed 003's ErrPartitionBusy: while a partition is being moved, another
// move or a split of it is refused with a BusyError saying what is in
// progress and for how long (the API answers it 409 partition_busy with
// Retry-After: api's TestAPartitionBusyIsAConflictToRetry); nothing
// changes. (The move is held up by cutting its source off the
// maintainer.)
func TestBusyPartitionIsRefused(t *testing.T) {
	t.Parallel()
	fc := newFaultCase(t, 0, nil)
	fc.c.Hub.Cut(fc.p.Node, fc.maintainer)
	sub := fc.submitMove()
	fc.c.Eventually(fc.p.ID+" is Draining", 10*time.Second, func() bool { return fc.route().Status == model.PartitionDraining })

	// Plans computed as if it were Active (their fingerprint is current):
	// the cluster's own check refuses them.
	snap := fc.c.State().Snapshot()
	for i := range snap.Partitions {
		if snap.Partitions[i].Route.ID == fc.p.ID {
			snap.Partitions[i].Route.Status = model.PartitionActive
		}
	}
	split, err := plan.Split(&snap, fc.p.ID, fc.p.Span.Start+"a", plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := plan.Move(&snap, fc.p.ID, fc.maintainer, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*plan.Plan{split, back} {
		_, err := fc.c.Submit(p, false)
		var busy *plan.BusyError
		if !errors.As(err, &busy) || busy.Since.IsZero() ||
			!strings.Contains(err.Error(), "partition "+fc.p.ID+" is busy: moving "+string(fc.p.Node)+" → "+string(fc.to)) {
			t.Fatalf("%s plan while busy: %v", p.Kind, err)
		}
	}
	// The planner in cdcctl refuses it the same way, before asking.
	real := fc.c.State().Snapshot()
	var busy *plan.BusyError
	if _, err := plan.Split(&real, fc.p.ID, fc.p.Span.Start+"a", plan.DefaultCosts); !errors.As(err, &busy) {
		t.Fatalf("local planning of a busy partition: %v", err)
	}
	fc.c.Hub.Heal(fc.p.Node, fc.maintainer)
	rec := fc.c.PlanEnd(sub.ID, 30*time.Second)
	if rec.State != exec.Done || fc.route().Node != fc.to {
		t.Fatalf("the first move: %s (%s); %s is on %s", rec.State, rec.Message, fc.p.ID, fc.route().Node)
	}
	fc.finish()
}

// A capture that cannot start any partition of a changefeed (as when it
// cannot open the sink) is kept out of that changefeed's placements, with
// a back-off, instead of being handed partitions and giving them back for
// ever: its partitions go to the other captures, the placement epochs
// stop climbing, the changefeed's incidents say why, and nothing is lost.
func TestACaptureThatCannotStartPartitionsIsExcluded(t *testing.T) {
	t.Parallel()
	const bad = model.NodeID("capture-3")
	faults := map[model.NodeID]capture.Faults{bad: {FailStart: func(r model.RouteEntry) error {
		if r.Changefeed == "demo" {
			return errors.New("injected: cannot open the sink")
		}
		return nil
	}}}
	c := enginetest.New(t, enginetest.Options{Faults: faults})
	c.StartCaptures(3)
	c.CreateChangefeed("demo", "gen://?tables=4&keys=100&rate=500", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	epochs := func() (sum uint64, onBad int) {
		for _, r := range c.State().Partitions["demo"] {
			sum += r.Route.Epoch
			if r.Route.Node == bad {
				onBad++
			}
		}
		return sum, onBad
	}
	last, since := uint64(0), time.Now()
	c.Eventually("demo's placements to settle off "+string(bad), 90*time.Second, func() bool {
		sum, n := epochs()
		if sum != last || n != 0 {
			last, since = sum, time.Now()
		}
		return n == 0 && time.Since(since) > 3*time.Second
	})
	settled, _ := epochs()
	time.Sleep(10 * time.Second) // the balance scheduler runs every pass
	if now, n := epochs(); now != settled || n != 0 {
		t.Fatalf("placements went on changing: epochs %d → %d, %d partitions on %s", settled, now, n, bad)
	}
	incidents := c.Changefeed("demo").Status.Incidents
	shown := false
	for _, in := range incidents {
		shown = shown || in.Kind == "excluded" && in.Node == bad && strings.Contains(in.Err, "cannot open the sink")
	}
	if !shown {
		t.Fatalf("the changefeed's incidents do not say %s was excluded: %+v", bad, incidents)
	}
	rep := c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 {
		t.Fatalf("after the exclusion: %+v", rep)
	}
	t.Logf("placement epochs settled at %d; incidents %+v; %d events verified", settled, incidents, rep.Expected)
}
