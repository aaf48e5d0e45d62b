package dispatcher_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// recoverSource: 8 tables written at 1,000 rows a second.
const recoverSource = "gen://?tables=8&keys=100&rate=1000"

// recoverRig is a three-capture cluster replicating recoverSource into a
// kfake cluster whose one broker fails on demand, one Kafka partition per
// table (partition=table), so that some tables live on the faulty broker
// and the others do not.
type recoverRig struct {
	t      *testing.T
	tc     *enginetest.Cluster
	kafka  *kafkatest.Cluster
	sink   string
	faulty map[string]bool // tables whose Kafka partition the faulty broker leads
}

func newRecoverRig(t *testing.T, sinkParams string) *recoverRig {
	kc, err := kafkatest.Start(3, "demo", 6)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	rig := &recoverRig{t: t, tc: tc, kafka: kc, faulty: map[string]bool{},
		sink: fmt.Sprintf("kafka://%s/demo?partition=table&retry-timeout=1s%s", kc.Addrs(), sinkParams)}
	// The sink's partitioner: FNV-1a of the table, modulo the partitions.
	onFaulty := kc.FaultyPartitions()
	for i := 1; i <= 8; i++ {
		table := fmt.Sprintf("t%04d", i)
		h := fnv.New32a()
		h.Write([]byte(table))
		rig.faulty[table] = onFaulty[int32(h.Sum32()%6)]
	}
	if n := len(trueKeys(rig.faulty)); n == 0 || n == 8 {
		t.Fatalf("%d of 8 tables on the faulty broker: the test needs some on each side", n)
	}
	tc.CreateChangefeed("demo", recoverSource, rig.sink, 2)
	return rig
}

func trueKeys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	return out
}

// checkpoints are the partitions' persisted positions, by table side.
func (rig *recoverRig) checkpoints() (healthy, faulty map[string]model.Ts) {
	st := rig.tc.State()
	healthy, faulty = map[string]model.Ts{}, map[string]model.Ts{}
	for pid, r := range st.Partitions["demo"] {
		side := healthy
		if rig.faulty[r.Route.Span.Table] {
			side = faulty
		}
		side[pid] = st.Progress["demo"][pid].Progress.Checkpoint
	}
	return healthy, faulty
}

// recovered counts the partitions re-created by a recovery, by side.
// Seed 002's acceptance 1 under kfake faults: a failed dispatcher epoch
// is recovered once, however many of its messages failed, so the failed
// epochs in a partition's history are distinct and rising.
func (rig *recoverRig) recovered() (healthy, faulty int) {
	for pid, r := range rig.tc.State().Partitions["demo"] {
		last := uint64(0)
		for _, ev := range r.Route.History {
			if ev.Kind != "recovered" {
				continue
			}
			if ev.Epoch <= last {
				rig.t.Fatalf("%s: epoch %d recovered after epoch %d: %+v", pid, ev.Epoch, last, r.Route.History)
			}
			last = ev.Epoch
			if rig.faulty[r.Route.Span.Table] {
				faulty++
			} else {
				healthy++
			}
		}
	}
	return healthy, faulty
}

// onceEach checks seed 002's acceptance 1 through the engine, from what
// the agents logged: every dispatcher (partition and routing epoch)
// started once on its capture, and asked once for its recovery, however
// many of its messages failed; it returns how many recoveries were asked
// for. (A manager that restarted a failed dispatcher under its old epoch,
// or asked again for the same one, fails it.) Only for tests without a
// changefeed restart or pause, which start dispatchers again under their
// epoch.
func (rig *recoverRig) onceEach() (asked int) {
	rig.t.Helper()
	for id, n := range rig.tc.Tail.Counted() {
		if n != 1 {
			rig.t.Errorf("logged %d times, want once: %s", n, id)
		}
		if strings.Contains(id, "asking its maintainer") {
			asked++
		}
	}
	return asked
}

// Seed 002 under load: one broker of three refuses every produce request
// (NOT_ENOUGH_REPLICAS) for 8 seconds. The dispatchers of the tables on
// it fail and are recovered, each by itself; the dispatchers of the
// other tables keep running (none re-created) and their checkpoints
// advance during the fault; the changefeed never restarts. Afterwards
// verify finds nothing lost and nothing out of order.
func TestAKafkaFaultRecoversOnlyTheDispatchersItHits(t *testing.T) {
	t.Parallel()
	rig := newRecoverRig(t, "")
	tc := rig.tc
	rig.warm()

	before, _ := rig.checkpoints()
	rig.kafka.Fail(kerr.NotEnoughReplicas.Code)
	time.Sleep(8 * time.Second)
	during, _ := rig.checkpoints()
	rig.kafka.Heal()
	healed := model.TsFromTime(time.Now())
	for pid, cp := range during {
		if cp <= before[pid] {
			t.Errorf("partition %s of a healthy table did not advance during the fault (%v → %v)", pid, before[pid], cp)
		}
	}
	tc.WaitCheckpoint("demo", healed+model.TsFromMillis(1000))
	healthy, faulty := rig.recovered()
	if healthy != 0 || faulty == 0 {
		t.Fatalf("recoveries: %d of healthy tables' partitions, %d of the faulty broker's; want 0 and some", healthy, faulty)
	}
	if asked := rig.onceEach(); asked < faulty {
		t.Fatalf("%d recoveries asked for, %d partitions re-created", asked, faulty)
	}
	tc.Eventually("the recoveries are counted and none is pending", 10*time.Second, func() bool {
		n := tc.RecoveriesTotal()
		return n.Recovered >= 1 && n.Pending == 0
	})
	rig.noRestarts()
	if st := tc.Changefeed("demo").Status; st.State != model.ChangefeedNormal {
		t.Fatalf("changefeed after the fault: %+v", st)
	}
	rep := rig.verify()
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify after the fault: %+v", rep)
	}
	t.Logf("%d dispatcher re-creations (all on the faulty broker); verified %d events: %d lost, %d out of order, %d duplicates (replays)",
		faulty, rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}

// healAndVerify ends the fault and checks what every fault shorter than
// the recover timeout must leave: the changefeed caught up, no recovery
// pending, no changefeed restarted, nothing lost or out of order.
func (rig *recoverRig) healAndVerify() verify.Report {
	tc, t := rig.tc, rig.t
	t.Helper()
	rig.kafka.Heal()
	tc.WaitCheckpoint("demo", model.TsFromTime(time.Now())+model.TsFromMillis(1000))
	tc.Eventually("no recovery is left pending", 15*time.Second, func() bool { return tc.RecoveriesTotal().Pending == 0 })
	rig.noRestarts()
	rep := rig.verify()
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify: %+v", rep)
	}
	return rep
}

// noRestarts fails the test if any capture restarted the changefeed (the
// fallback): a fault shorter than the recover timeout never needs it.
func (rig *recoverRig) noRestarts() {
	rig.t.Helper()
	if n := rig.tc.RecoveriesTotal().Restarted; len(n) != 0 {
		rig.t.Fatalf("changefeed restarts %v for a fault shorter than the recover timeout", n)
	}
}

// warm waits until the changefeed replicates.
func (rig *recoverRig) warm() { rig.tc.Warm("demo", 1500*time.Millisecond) }

func (rig *recoverRig) verify() verify.Report { return rig.tc.PauseAndVerify("demo") }

// Seed 002, acceptance 5 (R10) under load: a fault that outlasts the
// recover timeout (3 s) ends in the fallback, a changefeed restart on
// each node whose dispatchers were hit, once, with its reason in the
// metrics and the changefeed's incidents; then it catches up, nothing
// lost, nothing out of order.
func TestAFaultLongerThanTheRecoverTimeoutRestartsTheChangefeed(t *testing.T) {
	t.Parallel()
	rig := newRecoverRig(t, "&recover-timeout=3s")
	rig.warm()
	rig.kafka.Fail(kerr.NotEnoughReplicas.Code)
	restarts := func() int { return rig.tc.RecoveriesTotal().Restarted["recover_timeout"] }
	rig.tc.Eventually("a recovery times out and the changefeed restarts", 40*time.Second, func() bool { return restarts() >= 1 })
	rig.kafka.Heal()
	healed := model.TsFromTime(time.Now())
	rig.tc.WaitCheckpoint("demo", healed+model.TsFromMillis(1000))
	for node, n := range rig.tc.Recoveries() {
		if n.Restarted["recover_timeout"] > 1 {
			t.Fatalf("%s restarted the changefeed %v times for one fault; want at most once", node, n.Restarted)
		}
	}
	st := rig.tc.Changefeed("demo").Status
	found := false
	for _, in := range st.Incidents {
		found = found || in.Kind == "restart" && in.Reason == "recover_timeout" && in.Err != ""
	}
	if !found || st.State != model.ChangefeedNormal {
		t.Fatalf("the changefeed (%s) does not show the restart: %+v", st.State, st.Incidents)
	}
	rep := rig.verify()
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify after the restart: %+v", rep)
	}
	t.Logf("%v restarts; verified %d events: %d lost, %d out of order, %d duplicates", restarts(), rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}

// Seed 002, acceptance 4 under load: while a broker fault makes the
// dispatchers of some tables fail and wait for recovery, one of their
// partitions is split and another moved to another capture, and a
// rebalance runs. When the fault ends nothing is left pending anywhere,
// nothing restarted the changefeed, and verify finds nothing lost and
// nothing out of order.
func TestRecoveriesClearThroughSplitsAndMovesDuringAFault(t *testing.T) {
	t.Parallel()
	rig := newRecoverRig(t, "")
	tc := rig.tc
	rig.warm()
	g := tc.Generator(tc.Changefeed("demo").Info.SourceURI)
	var hit []model.RouteEntry
	for _, r := range tc.State().SortedPartitions("demo") {
		if rig.faulty[r.Route.Span.Table] {
			hit = append(hit, r.Route)
		}
	}
	if len(hit) < 2 {
		t.Fatalf("%d partitions on the faulty broker; want 2", len(hit))
	}
	rig.kafka.Fail(kerr.NotEnoughReplicas.Code)
	tc.Eventually("some dispatchers wait for recovery", 20*time.Second, func() bool { return tc.RecoveriesTotal().Pending >= 1 })
	key, ok := enginetest.MiddleKey(g, hit[0].Span)
	if !ok {
		t.Fatalf("%s has fewer than 2 keys", hit[0].ID)
	}
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, hit[0].ID, key, plan.DefaultCosts) })
	to := tc.FollowerOf(tc.State().Partitions["demo"][hit[1].ID].Route.Node)
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, hit[1].ID, to, plan.DefaultCosts) })
	snap := tc.State().Snapshot()
	if p, err := plan.Rebalance(&snap, "demo", 2, false, plan.DefaultCosts); err == nil && len(p.Batches) > 0 {
		tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) {
			return plan.Rebalance(s, "demo", 2, false, plan.DefaultCosts)
		})
	}
	rep := rig.healAndVerify()
	answered := tc.RecoveriesTotal().Answered
	t.Logf("answers: %v SUPERSEDED, %v RUNNING; verified %d events: %d lost, %d out of order, %d duplicates",
		answered[transport.RecoverSuperseded], answered[transport.RecoverRunning],
		rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}

// Seed 002, acceptance 2 (R7) and 3 (R8) under kfake faults: the changefeed's
// maintainer moves while recoveries are pending (its capture stops). The
// recoveries on the other captures are not dropped: they follow the new
// maintainer, which goes on re-creating their dispatchers while the fault
// lasts; when it ends nothing is left pending, nothing restarted, and
// verify finds nothing lost and nothing out of order.
func TestRecoveriesFollowAMaintainerThatMovesDuringAFault(t *testing.T) {
	t.Parallel()
	rig := newRecoverRig(t, "")
	tc := rig.tc
	rig.warm()
	tc.MaintainerOf("demo")
	old := tc.State().Changefeeds["demo"].Maintainer
	rig.kafka.Fail(kerr.NotEnoughReplicas.Code)
	tc.Eventually("a capture other than the maintainer's waits for a recovery", 20*time.Second, func() bool {
		for node, n := range tc.Recoveries() {
			if node != old.Node && n.Pending >= 1 {
				return true
			}
		}
		return false
	})
	if err := tc.Stop(old.Node); err != nil {
		t.Fatalf("stopping %s: %v", old.Node, err)
	}
	var moved time.Time
	tc.Eventually("the maintainer moves", 30*time.Second, func() bool {
		now := tc.State().Changefeeds["demo"].Maintainer
		if now.Node != "" && now.Node != old.Node && now.Epoch > old.Epoch {
			moved = time.Now()
			return true
		}
		return false
	})
	// Acceptance 3 (R8): the deposed maintainer's late answers change
	// nothing. FAILED for every partition under its current epoch, sent
	// as the old maintainer under its epoch, would restart the changefeed
	// on every capture with a pending recovery (healAndVerify counts the
	// restarts: none).
	// Sent every 50 ms for 3 s, with the routing epochs of the moment:
	// a pending request's identity holds only until its partition is
	// re-created.
	stale := tc.Hub.Join(old.Node)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, r := range tc.State().Partitions["demo"] {
			msg, err := transport.NewMessage(old.Node, r.Route.Node, transport.TopicRecoverAnswer, transport.RecoverAnswer{Changefeed: "demo", MaintainerEpoch: old.Epoch,
				Answers: []transport.RecoverReply{{ID: r.Route.ID, Epoch: r.Route.Epoch, State: transport.RecoverFailed, Reason: "a deposed maintainer's late answer"}}})
			if err != nil {
				t.Fatal(err)
			}
			_ = stale.Send(context.Background(), msg) // a node may be cut off: the answer is lost, as on a wire
		}
	}
	stale.Close()
	// The fault goes on: dispatchers re-created by the old maintainer
	// fail again and their requests must reach the new one.
	tc.Eventually("the new maintainer recovers a dispatcher", 30*time.Second, func() bool {
		for _, r := range tc.State().Partitions["demo"] {
			for _, ev := range r.Route.History {
				if ev.Kind == "recovered" && ev.Time.After(moved) {
					return true
				}
			}
		}
		return false
	})
	if n := tc.RecoveriesTotal().Pending; n < 1 {
		t.Fatalf("%v recoveries pending during the fault after the maintainer moved; want some still waiting", n)
	}
	rep := rig.healAndVerify()
	// Still every dispatcher started once and asked once (acceptance 2).
	rig.onceEach()
	t.Logf("maintainer %s → %s; verified %d events: %d lost, %d out of order, %d duplicates",
		old.Node, tc.State().Changefeeds["demo"].Maintainer.Node, rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}
