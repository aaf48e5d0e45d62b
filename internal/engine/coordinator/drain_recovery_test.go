package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A drain's scenarios (seed 000's recovery table), each on an in-process
// cluster under a generator's load, each ending with the sinks verified.

// drainOfTwelve is a cluster of four captures and twelve changefeeds,
// with a drain of a follower submitted paused at batch 1.
type drainOfTwelve struct {
	c      *enginetest.Cluster
	leader model.NodeID
	target model.NodeID
	plan   *exec.Record
}

func startDrainOfTwelve(t *testing.T, faults map[model.NodeID]capture.Faults) drainOfTwelve {
	t.Helper()
	c := enginetest.New(t, enginetest.Options{Faults: faults})
	d := drainOfTwelve{c: c, leader: c.StartCaptures(4).Node}
	c.Feeds(12)
	d.target, d.plan = pausedDrain(c, d.leader, 3)
	return d
}

// pausedDrain drains a follower holding at least min maintainers, batch
// 1, submitted paused so that no maintainer move has begun when the test
// picks one (a pause requested after the submission came too late on a
// loaded machine).
func pausedDrain(c *enginetest.Cluster, leader model.NodeID, min int) (model.NodeID, *exec.Record) {
	c.T.Helper()
	var target model.NodeID
	c.Eventually(fmt.Sprintf("a follower holds at least %d maintainers", min), 20*time.Second, func() bool {
		for _, id := range c.IDs() {
			if id != leader && c.MaintainersOn(id) >= min {
				target = id
				return true
			}
		}
		return false
	})
	rec, err := c.Drain(target, 1, true)
	if err != nil {
		c.T.Fatal(err)
	}
	if rec := c.Plan(rec.ID); rec.State != exec.Paused || enginetest.StartedSteps(rec, plan.StepMoveMaintainer) != 0 {
		c.T.Fatalf("a drain submitted paused is %s with %d maintainer moves begun", rec.State, enginetest.StartedSteps(rec, plan.StepMoveMaintainer))
	}
	return target, rec
}

// pendingDestination is the destination of a maintainer move of a drain
// plan that has not begun, other than the coordinator.
func pendingDestination(c *enginetest.Cluster, planID string, coordinator model.NodeID) model.NodeID {
	c.T.Helper()
	rec := c.Plan(planID)
	for _, s := range rec.Steps {
		step := rec.Step(s)
		if step.Kind == plan.StepMoveMaintainer && s.State == exec.StepPending && step.To != coordinator {
			return step.To
		}
	}
	c.T.Fatalf("no pending maintainer move to a capture other than the coordinator %s in %+v", coordinator, rec.Steps)
	return ""
}

// emptyOf holds when no maintainer or partition is on any of nodes.
func emptyOf(c *enginetest.Cluster, nodes ...model.NodeID) error {
	st := c.State()
	on := func(n model.NodeID) bool {
		for _, x := range nodes {
			if n == x {
				return true
			}
		}
		return false
	}
	for _, id := range st.ChangefeedIDs() {
		if n := st.Changefeeds[id].Maintainer.Node; on(n) {
			return fmt.Errorf("%s: maintainer still on %s", id, n)
		}
		for _, r := range st.Partitions[id] {
			if on(r.Route.Node) {
				return fmt.Errorf("%s/%s still on %s", id, r.Route.ID, r.Route.Node)
			}
		}
	}
	return nil
}

// Seed 000 recovery scenarios 2, 3 and 6: a destination of the drain dies
// while the drain runs. Maintainers already moved onto it (or starting
// there, which is where a bootstrap would fail) are rescheduled by the
// basic scheduler; steps still planned onto it are re-planned onto the
// least-loaded capture left, with a replanned event that says so. The
// drain finishes and nothing is lost.
func TestDrainDestinationDiesMidDrain(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	c := d.c
	// The victim: a destination (not the coordinator) of a step not begun.
	victim := pendingDestination(c, d.plan.ID, d.leader)
	c.Crash(victim)
	diedAt := time.Now()
	c.Eventually(string(victim)+" is gone from etcd", 20*time.Second, func() bool {
		_, ok := c.State().Nodes[victim]
		return !ok
	})
	c.RequestPlan(d.plan.ID, exec.RequestResume)
	rec := c.PlanEnd(d.plan.ID, 60*time.Second)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	replanned := ""
	for _, ev := range rec.Log {
		if ev.Type == exec.EventReplanned && strings.Contains(ev.Message, string(victim)) {
			replanned = ev.Message
		}
	}
	if replanned == "" {
		t.Fatalf("no replanned event names %s: %+v", victim, rec.Log)
	}
	for _, s := range rec.Steps {
		if step := rec.Step(s); step.To == victim && (s.Started == nil || s.Started.After(diedAt)) {
			t.Fatalf("a move to the dead %s began after it died: %+v", victim, s)
		}
	}
	if err := emptyOf(c, d.target, victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("replanned: %s", replanned)
	c.VerifyAll(false)
}

// Seed 000 recovery scenario 8: every capture but the one being drained
// dies. The draining capture is the only one left: it goes back to
// Alive, becomes the coordinator, the drain record is cleared, the plan
// ends saying why, and the changefeeds run on it without loss.
func TestOnlyTheDrainingCaptureLeft(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	feeds := c.Feeds(6)
	// Two maintainers at least: the paused plan keeps one there, so the
	// drain cannot complete (and the capture go Stopping) before the
	// crashes.
	target, rec := pausedDrain(c, leader, 2)
	for _, id := range c.IDs() {
		if id != target && id != leader {
			c.Crash(id)
		}
	}
	c.Crash(leader)
	c.Eventually(string(target)+" leads, Alive", 20*time.Second, func() bool {
		l, ok := c.Leader()
		return ok && l.Node == target && c.State().LivenessOf(target) == model.LivenessAlive
	})
	if d := c.State().Drain; d != nil {
		t.Fatalf("drain record still in etcd: %+v", d)
	}
	rec = c.PlanEnd(rec.ID, 20*time.Second)
	if rec.State != exec.Failed || !strings.Contains(rec.Message, "only capture left") {
		t.Fatalf("plan %s: %s (%s), want failed naming the only-capture-left exception", rec.ID, rec.State, rec.Message)
	}
	c.Eventually("every partition runs on "+string(target), 30*time.Second, func() bool {
		st := c.State()
		for _, id := range st.ChangefeedIDs() {
			if st.Changefeeds[id].Maintainer.Node != target {
				return false
			}
			for _, r := range st.Partitions[id] {
				if r.Route.Node != target {
					return false
				}
			}
		}
		return true
	})
	for _, id := range feeds {
		c.WaitCheckpoint(id, c.Changefeed(id).Status.CheckpointTs)
	}
	c.VerifyAll(false)
}

// Seed 000 recovery scenario 6: a drain moves maintainers onto a capture
// where they cannot start (they cannot open their changefeed's source
// there). Each says so in its changefeed's status; the coordinator places
// it on another capture and keeps it off that one; the drain finishes,
// the changefeed's incidents name the capture and the error, and nothing
// is lost or written twice.
func TestAMaintainerThatCannotStartIsPlacedElsewhere(t *testing.T) {
	t.Parallel()
	var bad atomic.Value // model.NodeID: where maintainers cannot start
	faults := map[model.NodeID]capture.Faults{}
	for i := 1; i <= 4; i++ {
		id := model.NodeID(fmt.Sprintf("capture-%d", i))
		faults[id] = capture.Faults{FailBootstrap: func(model.ChangefeedID) error {
			if b, _ := bad.Load().(model.NodeID); b == id {
				return errors.New("injected: the source is unreachable from " + string(id))
			}
			return nil
		}}
	}
	d := startDrainOfTwelve(t, faults)
	c := d.c
	// The bad capture: a destination (not the coordinator) of a step
	// not begun.
	victim := pendingDestination(c, d.plan.ID, d.leader)
	bad.Store(victim)
	c.RequestPlan(d.plan.ID, exec.RequestResume)
	rec := c.PlanEnd(d.plan.ID, 3*time.Minute)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	c.Eventually("no maintainer on "+string(victim)+" or "+string(d.target), time.Minute, func() bool {
		return c.MaintainersOn(victim) == 0 && c.MaintainersOn(d.target) == 0
	})
	named := 0
	st := c.State()
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		if e.Maintainer.Node == victim {
			t.Fatalf("%s: maintainer back on %s", id, victim)
		}
		for _, in := range e.Status.Incidents {
			if in.Kind == model.IncidentMaintainerFailed && in.Node == victim && strings.Contains(in.Err, "injected") {
				named++
			}
		}
	}
	if named == 0 {
		t.Fatalf("no changefeed's status says its maintainer could not start on %s", victim)
	}
	t.Logf("%d maintainers could not start on %s and were placed elsewhere", named, victim)
	c.VerifyAll(true)
}

// Seed 000 recovery scenario 2, with the move in flight: the drain has
// just placed a maintainer on its destination (the step runs) when that
// destination dies. The basic scheduler places the maintainer again on a
// live capture, the step ends, the drain finishes, and nothing is lost.
func TestDrainDestinationDiesWithAMoveInFlight(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	c := d.c
	c.RequestPlan(d.plan.ID, exec.RequestResume)
	// Wait for a maintainer step to a capture other than the coordinator
	// to run: its maintainer is on the destination, the step not done.
	var victim model.NodeID
	var cf string
	c.Eventually("a maintainer move in flight to a capture other than the coordinator", time.Minute, func() bool {
		rec := c.Plan(d.plan.ID)
		for _, s := range rec.Steps {
			step := rec.Step(s)
			if step.Kind == plan.StepMoveMaintainer && s.State == exec.StepRunning && step.To != d.leader && step.To != d.target {
				if e := c.State().Changefeeds[model.ChangefeedID(step.Changefeed)]; e != nil && e.Maintainer.Node == step.To {
					victim, cf = step.To, step.Changefeed
					return true
				}
			}
		}
		return false
	})
	c.Crash(victim)
	t.Logf("crashed %s while %s's maintainer was moving onto it", victim, cf)
	rec := c.PlanEnd(d.plan.ID, 2*time.Minute)
	if rec.State != exec.Done {
		t.Fatalf("plan %s: %s (%s)", rec.ID, rec.State, rec.Message)
	}
	c.Eventually("no maintainer or partition on "+string(victim)+" or "+string(d.target), time.Minute, func() bool {
		return emptyOf(c, d.target, victim) == nil
	})
	// A crash may have written some rows twice (at-least-once); none may
	// be missing.
	c.VerifyAll(false)
}

// Seed 000 recovery scenario 1, with pause and resume: a drain plan is
// paused (no new step begins), resumed, and its coordinator is killed;
// the new coordinator resumes the plan from etcd and finishes it, never
// more than the batch at once; nothing is lost.
func TestDrainPlanPausesResumesAndSurvivesCoordinatorCrash(t *testing.T) {
	t.Parallel()
	d := startDrainOfTwelve(t, nil)
	c := d.c
	began := enginetest.StartedSteps(c.Plan(d.plan.ID), plan.StepMoveMaintainer)
	time.Sleep(2 * time.Second)
	if now := enginetest.StartedSteps(c.Plan(d.plan.ID), plan.StepMoveMaintainer); now != began {
		t.Fatalf("a paused plan began %d more maintainer moves", now-began)
	}
	c.RequestPlan(d.plan.ID, exec.RequestResume)
	c.Eventually("the resumed plan moves a maintainer", 10*time.Second, func() bool {
		return enginetest.StartedSteps(c.Plan(d.plan.ID), plan.StepMoveMaintainer) > began
	})

	// Kill the coordinator mid-plan.
	c.Crash(d.leader)
	next := c.WaitLeader()
	if next.Node == d.leader {
		t.Fatalf("the crashed coordinator still leads")
	}
	rec := c.PlanEnd(d.plan.ID, 60*time.Second)
	if rec.State != exec.Done || rec.MaxConcurrent(plan.StepMoveMaintainer) != 1 {
		t.Fatalf("plan %s: %s (%s), at most %d maintainer moves at once", rec.ID, rec.State, rec.Message, rec.MaxConcurrent(plan.StepMoveMaintainer))
	}
	c.Eventually(string(d.target)+" is Stopping and empty", 30*time.Second, func() bool {
		st := c.State()
		maintainers, dispatchers := coordinator.DrainProgress(st, d.target)
		return st.LivenessOf(d.target) == model.LivenessStopping && maintainers == 0 && len(dispatchers) == 0
	})
	ids := c.State().ChangefeedIDs()
	for _, id := range ids {
		c.SetState(id, model.ChangefeedPaused)
	}
	time.Sleep(2 * time.Second)
	dups := uint64(0)
	for _, id := range ids {
		rep := c.VerifyPaused(id)
		if !rep.OK || rep.Lost != 0 {
			t.Fatalf("%s: %+v", id, rep)
		}
		dups += rep.Duplicates
	}
	t.Logf("plan %s finished by %s after %s crashed: %d steps; 0 lost, %d duplicates (the crashed coordinator also ran dispatchers)", rec.ID, next.Node, d.leader, len(rec.Steps), dups)
}

// Seed 000, recovery scenario 4: the capture being drained crashes while
// its partitions are moving. Moves whose source died resume on their
// target from the last checkpoint; partitions not yet moving are placed
// again; the drain ends by itself (its plan ends saying why, and the
// drain record is cleared); nothing is lost.
func TestDrainedCaptureCrashingMidDrainLosesNothing(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3)
	c.CreateChangefeed("demo", "gen://?tables=8&keys=200&rate=1500&ddl_every=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	cp := c.Warm("demo", 1500*time.Millisecond)
	victim := c.FollowerOf(leader.Node)
	before, _ := c.PartitionsOn("demo", victim)
	rec, err := c.Drain(victim, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	// Crash as soon as the first move starts: a partition of the victim
	// is Draining, or (the moves are quick, and a poll may fall between
	// them) it has fewer than it had.
	c.Eventually("a move off the Draining capture starts", 10*time.Second, func() bool {
		on, draining := c.PartitionsOn("demo", victim)
		return draining > 0 || on < before
	})
	c.Crash(victim)
	c.Eventually("every partition is Active on a live capture", 30*time.Second, func() bool {
		for _, r := range c.State().Partitions["demo"] {
			if r.Route.Node == victim || r.Route.Status != model.PartitionActive {
				return false
			}
		}
		return true
	})
	rec = c.PlanEnd(rec.ID, 30*time.Second)
	if rec.State != exec.Done && !strings.Contains(rec.Message, string(victim)+" is gone") {
		t.Fatalf("the drain plan of the crashed %s: %s (%s); want it ended, saying why", victim, rec.State, rec.Message)
	}
	c.Eventually("the drain record is cleared", 30*time.Second, func() bool { return c.State().Drain == nil })
	c.WaitCheckpoint("demo", cp+model.TsFromMillis(1500))
	rep := c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 {
		t.Fatalf("verify after a crash mid-drain: %+v", rep)
	}
	t.Logf("drain plan: %s (%s)", rec.State, rec.Message)
	t.Logf("verified %d events after a crash mid-drain: %d lost, %d duplicates (at-least-once)", rep.Expected, rep.Lost, rep.Duplicates)
}

// Seed 000's single exception (its scenario 7): in a two-capture cluster
// the coordinator crashes during a drain of the other capture. When the
// coordinator's lease expires, the Draining capture is the only one left:
// it returns to Alive, the drain record is cleared, and it leads.
func TestOnlyNodeLeftReturnsToAliveAndLeads(t *testing.T) {
	t.Parallel()
	var c *enginetest.Cluster
	var survivor model.NodeID
	for attempt := 1; ; attempt++ {
		c = enginetest.New(t, enginetest.Options{})
		leader := c.StartCaptures(2)
		survivor = c.FollowerOf(leader.Node)
		// The coordinator had just started a drain when it crashed: the
		// record lands within its term, which lasts until its lease
		// expires. A crashing capture closes its etcd client, and now and
		// then its runner gives the term up before the record is written:
		// then the scenario did not happen, and it is set up again.
		c.Capture(leader.Node).Crash()
		_, err := c.Store.StartDrain(context.Background(), leader.Fence, model.DrainRecord{Target: survivor, BatchSize: 1, StartTime: time.Now()})
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "no longer the coordinator") {
			t.Logf("attempt %d: the term ended before the drain record was written (%v); setting up again", attempt, err)
			c.StopAll()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Crash(leader.Node)
		break
	}
	c.Eventually("the only capture left leads", 15*time.Second, func() bool {
		l, ok := c.Leader()
		return ok && l.Node == survivor
	})
	st := c.State()
	if got := st.LivenessOf(survivor); got != model.LivenessAlive {
		t.Fatalf("survivor is %s, want Alive", got)
	}
	if st.Drain != nil {
		t.Fatalf("drain record still in etcd: %+v", st.Drain)
	}
}

// A drained capture whose etcd session lapses (its link to etcd froze
// past the TTL: a long GC pause, a SIGSTOP, a network fault) joins again
// Stopping, as it was, and is given no work: before, it came back Alive,
// and the balancer moved partitions onto the capture its operator had
// taken out of service (found by the chaos suite's isolate-target).
func TestADrainedCaptureWhoseSessionLapsesStaysOutOfService(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	leader := c.StartCaptures(3)
	c.Feeds(2)
	target := c.FollowerOf(leader.Node)
	onTarget := func() int { return c.State().PartitionsOn(target) }
	c.Eventually("partitions on the target", 20*time.Second, func() bool { return onTarget() > 0 })
	rec, err := c.Drain(target, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if rec = c.PlanEnd(rec.ID, time.Minute); rec.State != exec.Done {
		t.Fatalf("the drain ended %s: %s", rec.State, rec.Message)
	}
	before := c.State().Nodes[target].Info.Incarnation
	c.Link(target).Freeze()
	time.Sleep(enginetest.SessionTTL + 3*time.Second)
	c.Link(target).Thaw()
	c.Eventually("the target joins again", 30*time.Second, func() bool {
		n, ok := c.State().Nodes[target]
		return ok && n.Info.Incarnation != before
	})
	if l := c.State().LivenessOf(target); l != model.LivenessStopping {
		t.Fatalf("the drained capture joined again %s, want Stopping", l)
	}
	// Long enough for a balancing pass to have moved work onto it.
	time.Sleep(5 * time.Second)
	if on := onTarget(); on > 0 {
		t.Fatalf("the drained capture was given %d partitions after its session lapsed", on)
	}
	c.VerifyAll(true)
}

// A capture holding partitions of a paused changefeed is drained too: its
// partitions, stopped at an exact checkpoint, are handed to the other
// captures without running, the drain ends, and the changefeed, resumed,
// goes on from where it stopped, nothing lost or written twice. Before,
// a paused changefeed's maintainer placed nothing, and the drain waited
// for its partitions until it timed out.
func TestADrainMovesAPausedChangefeedsPartitions(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	feeds := c.Feeds(2)
	paused := feeds[1]
	target := followerHolding(c, leader, paused)
	rep := c.PauseAndVerify(paused)
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("%s paused: %+v", paused, rep)
	}
	checkpoint := c.Changefeed(paused).Status.CheckpointTs
	drainToEmpty(t, c, target)
	if got := c.Changefeed(paused); got.Status.State != model.ChangefeedPaused || got.Status.CheckpointTs != checkpoint {
		t.Fatalf("%s after the drain: %s at %s; want paused at %s", paused, got.Status.State, got.Status.CheckpointTs, checkpoint)
	}
	c.SetState(paused, model.ChangefeedNormal)
	c.WaitCheckpoint(paused, checkpoint+model.TsFromMillis(500))
	if dups := c.VerifyAll(true); dups != 0 {
		t.Fatalf("%d events written twice", dups)
	}
}

// A drain cancelled leaves its capture Draining (nothing new goes to it)
// until its process restarts; drained again, the drain takes it over and
// ends: it was refused as "another drain operation is in progress" with
// no drain running, and so was a drain of any other capture.
func TestACancelledDrainIsTakenOverByTheSameDrainAgain(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	c.Feeds(3)
	target, rec := pausedDrain(c, leader, 1)
	c.RequestPlan(rec.ID, exec.RequestCancel)
	if rec = c.PlanEnd(rec.ID, 30*time.Second); rec.State != exec.Cancelled {
		t.Fatalf("the cancelled drain: %s (%s)", rec.State, rec.Message)
	}
	if l := c.State().LivenessOf(target); l != model.LivenessDraining {
		t.Fatalf("%s is %s after its drain was cancelled; want Draining", target, l)
	}
	again, err := c.Drain(target, 1, false)
	if err != nil {
		t.Fatalf("the same drain again: %v", err)
	}
	if again = c.PlanEnd(again.ID, 60*time.Second); again.State != exec.Done {
		t.Fatalf("the drain again: %s (%s)", again.State, again.Message)
	}
	if err := emptyOf(c, target); err != nil {
		t.Fatal(err)
	}
	c.VerifyAll(true)
}

// A capture holding partitions of a failed changefeed is drained too, as
// one of a paused changefeed is: its maintainer moves them (their
// dispatchers are stopped), the drain ends, and the changefeed, resumed,
// goes on from where it stopped, nothing lost. Before, a failed
// changefeed's maintainer placed nothing, and the drain waited for ever.
func TestADrainMovesAFailedChangefeedsPartitions(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3).Node
	feeds := c.Feeds(2)
	failed := feeds[1]
	target := followerHolding(c, leader, failed)
	c.WaitCheckpoint(failed, model.TsFromTime(time.Now()))
	// (Its maintainer writes its status every second: read again while
	// a write lands between the read and the failure.)
	for attempt := 0; ; attempt++ {
		e := c.Changefeed(failed)
		err := c.Store.FailChangefeed(context.Background(), e.FenceOf(c.Store.Keys()), e, "a test failed it")
		if err == nil {
			break
		}
		if !errors.Is(err, meta.ErrStale) || attempt == 20 {
			t.Fatal(err)
		}
	}
	drainToEmpty(t, c, target)
	if got := c.Changefeed(failed).Status.State; got != model.ChangefeedFailed {
		t.Fatalf("%s after the drain: %s; want failed", failed, got)
	}
	c.SetState(failed, model.ChangefeedNormal)
	c.WaitCheckpoint(failed, model.TsFromTime(time.Now()))
	c.VerifyAll(false)
}

// followerHolding waits for a capture other than the leader to hold an
// Active partition of cf, and returns it.
func followerHolding(c *enginetest.Cluster, leader model.NodeID, cf model.ChangefeedID) model.NodeID {
	c.T.Helper()
	var target model.NodeID
	c.Eventually("a follower holds a partition of "+string(cf), 20*time.Second, func() bool {
		for _, r := range c.State().Partitions[cf] {
			if n := r.Route.Node; n != "" && n != leader && r.Route.Status == model.PartitionActive {
				target = n
				return true
			}
		}
		return false
	})
	return target
}

// drainToEmpty drains target with batch 1 and checks the drain is done
// and target holds nothing.
func drainToEmpty(t *testing.T, c *enginetest.Cluster, target model.NodeID) {
	t.Helper()
	rec, err := c.Drain(target, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if rec = c.PlanEnd(rec.ID, 60*time.Second); rec.State != exec.Done {
		t.Fatalf("the drain of %s: %s (%s)", target, rec.State, rec.Message)
	}
	if err := emptyOf(c, target); err != nil {
		t.Fatal(err)
	}
}
