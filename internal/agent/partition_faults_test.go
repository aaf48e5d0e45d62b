package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
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
	tc         *testCluster
	c          *api.Client
	sink       string
	cov        *enginetest.Coverage
	p          model.RouteEntry // the partition
	maintainer model.NodeID     // demo's maintainer
	to         model.NodeID     // where the move goes
}

// newFaultCase starts 3 captures with the given faults and the demo
// changefeed under load, and picks a partition that is not on demo's
// maintainer's node and a target that is neither.
func newFaultCase(t *testing.T, moveTimeout time.Duration, faults map[model.NodeID]Faults) *faultCase {
	tc := newTestCluster(t)
	tc.moveTimeout, tc.faults = moveTimeout, faults
	tc.startCaptures(3)
	fc := &faultCase{tc: tc, c: tc.client(), sink: "file://" + t.TempDir() + "?flush-interval=100ms"}
	tc.runDemo(fc.c, demoSource, fc.sink, time.Second)
	fc.cov = enginetest.WatchCoverage(t, tc.store, "demo")
	st := tc.state()
	fc.maintainer = st.Changefeeds["demo"].Maintainer.Node
	for _, r := range st.SortedPartitions("demo") {
		if r.Route.Node != fc.maintainer && r.Route.Status == model.PartitionActive {
			fc.p = r.Route
			break
		}
	}
	for id := range tc.nodes {
		if id != fc.maintainer && id != fc.p.Node {
			fc.to = id
		}
	}
	if fc.p.ID == "" || fc.to == "" {
		t.Fatalf("no partition off the maintainer %s, or no third capture", fc.maintainer)
	}
	return fc
}

// move submits the move and waits for the plan's end.
func (fc *faultCase) move() *api.PlanResponse {
	fc.tc.t.Helper()
	ctx := context.Background()
	snap, err := fc.c.Snapshot(ctx)
	if err != nil {
		fc.tc.t.Fatal(err)
	}
	p, err := plan.Move(&snap.Snapshot, fc.p.ID, fc.to, plan.DefaultCosts)
	if err != nil {
		fc.tc.t.Fatal(err)
	}
	sub, err := fc.c.SubmitPlan(ctx, api.SubmitPlanRequest{Plan: p})
	if err != nil {
		fc.tc.t.Fatal(err)
	}
	rec := fc.tc.planEnd(fc.c, sub.ID, 30*time.Second)
	return rec
}

// finish checks the routing table and the sink.
func (fc *faultCase) finish() {
	fc.tc.t.Helper()
	if err := fc.cov.Err(); err != nil {
		fc.tc.t.Fatal(err)
	}
	rep := fc.tc.pauseAndVerify(fc.c, "demo", fc.sink, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		fc.tc.t.Fatalf("after the fault: %+v", rep)
	}
	fc.tc.t.Logf("%d events verified: 0 lost, 0 duplicates; coverage held in %d checks", rep.Expected, fc.cov.Count())
}

func (fc *faultCase) route() model.RouteEntry {
	return fc.tc.state().Partitions["demo"][fc.p.ID].Route
}

// Row 1, failure before ExecuteMigrateOut: the source never reports that
// it gave the partition up (its link to the maintainer is cut). After
// --move-timeout the routing entry goes back to Active on the source,
// which resumes exactly where it stopped; the plan fails saying so.
func TestMoveRevertedWhenTheSourceNeverHandsOver(t *testing.T) {
	t.Parallel()
	fc := newFaultCase(t, 2*time.Second, nil)
	fc.tc.hub.Cut(fc.p.Node, fc.maintainer)
	rec := fc.move()
	fc.tc.hub.Heal(fc.p.Node, fc.maintainer)
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
	// victim is "partition@node": only the move's target fails it (the
	// source's restart must succeed).
	var victim atomic.Value
	victim.Store("")
	faults := map[model.NodeID]Faults{}
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3"} {
		faults[id] = Faults{FailStart: func(r model.RouteEntry) error {
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
	fail := Faults{FailPlace: func(r model.RouteEntry) error {
		if r.ID == victim.Load().(string) && failures.Add(1) <= 3 {
			return errors.New("injected: etcd write failed")
		}
		return nil
	}}
	fc := newFaultCase(t, 0, map[model.NodeID]Faults{"capture-1": fail, "capture-2": fail, "capture-3": fail})
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
// move or a split of it is refused with 409 partition_busy, Retry-After,
// and a message saying what is in progress and for how long; nothing
// changes. (The move is held up by cutting its source off the
// maintainer.)
func TestBusyPartitionIsRefused(t *testing.T) {
	t.Parallel()
	fc := newFaultCase(t, 0, nil)
	ctx := context.Background()
	fc.tc.hub.Cut(fc.p.Node, fc.maintainer)
	snap, err := fc.c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := plan.Move(&snap.Snapshot, fc.p.ID, fc.to, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := fc.c.SubmitPlan(ctx, api.SubmitPlanRequest{Plan: first})
	if err != nil {
		t.Fatal(err)
	}
	fc.tc.eventually(fc.p.ID+" is Draining", 10*time.Second, func() bool { return fc.route().Status == model.PartitionDraining })

	// Plans computed as if it were Active (their fingerprint is current):
	// the cluster's own check refuses them.
	snap, err = fc.c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Snapshot.Partitions {
		if snap.Snapshot.Partitions[i].Route.ID == fc.p.ID {
			snap.Snapshot.Partitions[i].Route.Status = model.PartitionActive
		}
	}
	split, err := plan.Split(&snap.Snapshot, fc.p.ID, fc.p.Span.Start+"a", plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := plan.Move(&snap.Snapshot, fc.p.ID, fc.maintainer, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*plan.Plan{split, back} {
		body, _ := json.Marshal(api.SubmitPlanRequest{Plan: p})
		resp, err := http.Post("http://"+fc.tc.nodes[fc.maintainer].addr+"/api/v2/plans", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || e.Code != api.CodePartitionBusy || resp.Header.Get("Retry-After") != "1" ||
			!strings.Contains(e.Message, "partition "+fc.p.ID+" is busy: moving "+string(fc.p.Node)+" → "+string(fc.to)) || !strings.Contains(e.Message, "(for ") {
			t.Fatalf("%s plan while busy: %d %s %+v", p.Kind, resp.StatusCode, resp.Header.Get("Retry-After"), e)
		}
	}
	// The planner in cdcctl refuses it the same way, before asking.
	real, _ := fc.c.Snapshot(ctx)
	if _, err := plan.Split(&real.Snapshot, fc.p.ID, fc.p.Span.Start+"a", plan.DefaultCosts); !api.IsCode(apiErr(err), api.CodePartitionBusy) {
		t.Fatalf("local planning of a busy partition: %v", err)
	}
	fc.tc.hub.Heal(fc.p.Node, fc.maintainer)
	rec := fc.tc.planEnd(fc.c, sub.ID, 30*time.Second)
	if rec.State != exec.Done || fc.route().Node != fc.to {
		t.Fatalf("the first move: %s (%s); %s is on %s", rec.State, rec.Message, fc.p.ID, fc.route().Node)
	}
	fc.finish()
}

func apiErr(err error) error {
	if e, ok := api.PlanError(err); ok {
		return e
	}
	return err
}

// A capture that cannot start any partition of a changefeed (as when it
// cannot open the sink) is kept out of that changefeed's placements, with
// a back-off, instead of being handed partitions and giving them back for
// ever: its partitions go to the other captures, the placement epochs
// stop climbing, `changefeed get` says why, and nothing is lost.
func TestACaptureThatCannotStartPartitionsIsExcluded(t *testing.T) {
	t.Parallel()
	const bad = model.NodeID("capture-3")
	faults := map[model.NodeID]Faults{bad: {FailStart: func(r model.RouteEntry) error {
		if r.Changefeed == "demo" {
			return errors.New("injected: cannot open the sink")
		}
		return nil
	}}}
	tc := newTestCluster(t)
	tc.faults = faults
	tc.startCaptures(3)
	c := tc.client()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	if _, err := c.CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=4&keys=100&rate=500", Sink: sink, PartitionsPerTable: 3}); err != nil {
		t.Fatal(err)
	}
	epochs := func() (sum uint64, onBad int) {
		for _, r := range tc.state().Partitions["demo"] {
			sum += r.Route.Epoch
			if r.Route.Node == bad {
				onBad++
			}
		}
		return sum, onBad
	}
	last, since := uint64(0), time.Now()
	tc.eventually("demo's placements to settle off "+string(bad), 90*time.Second, func() bool {
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
	got, err := c.Changefeed(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	shown := false
	for _, in := range got.Incidents {
		shown = shown || in.Kind == "excluded" && in.Node == bad && strings.Contains(in.Err, "cannot open the sink")
	}
	if !shown {
		t.Fatalf("changefeed get does not say %s was excluded: %+v", bad, got.Incidents)
	}
	rep := tc.pauseAndVerify(c, "demo", sink, verifyStorage)
	if !rep.OK || rep.Lost != 0 {
		t.Fatalf("after the exclusion: %+v", rep)
	}
	t.Logf("placement epochs settled at %d; incidents %+v; %d events verified", settled, got.Incidents, rep.Expected)
}
