package meta

import (
	"errors"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// drainCluster is bigFeed with captures n1, n2 and n3 registered, and n2
// campaigning in the election.
func drainCluster(t *testing.T) *bigFeed {
	t.Helper()
	f, _ := newBigFeed(t, 1)
	for _, id := range []model.NodeID{"n1", "n2", "n3"} {
		f.register(id)
	}
	if _, err := f.cli.Put(f.ctx, f.store.Keys().ElectionPrefix()+"n2-7", "n2"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *bigFeed) drainEpoch() uint64 {
	f.t.Helper()
	e, err := f.store.DrainEpoch(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}

// StartDrain writes the drain record with the first epoch and moves its
// target to Draining, withdrawing its candidacy, in one write.
func TestStartingADrainRecordsItAndDrainsTheTarget(t *testing.T) {
	f := drainCluster(t)
	if f.drainEpoch() != 0 {
		t.Fatal("a drain epoch before any drain")
	}
	rec, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-1", BatchSize: 4, StartTime: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if rec.Epoch != 1 || st.Drain == nil || st.Drain.Epoch != 1 || st.Drain.Target != "n2" || st.Drain.PlanID != "drain-1" || f.drainEpoch() != 1 {
		t.Fatalf("the first drain: returned epoch %d, stored %+v, counter %d", rec.Epoch, st.Drain, f.drainEpoch())
	}
	if got := st.Liveness["n2"].Record.State; got != model.LivenessDraining {
		t.Fatalf("the target is %s, want Draining", got)
	}
	// A Draining capture must not become coordinator.
	if st.IsCandidate("n2") {
		t.Fatal("the drained capture is still a candidate in the election")
	}
}

// Only one drain at a time: a second target is refused with
// ErrDrainInProgress, the drained target again with the rule that it is
// already Draining, and an unregistered one with ErrNotRegistered. None of
// them changes anything.
func TestASecondDrainIsRefusedWhileOneIsInProgress(t *testing.T) {
	f := drainCluster(t)
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-1"}); err != nil {
		t.Fatal(err)
	}
	f.refused("a drain of n3 while n2 drains", ErrDrainInProgress, func() error {
		_, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n3", PlanID: "drain-2"})
		return err
	})
	before := f.everything()
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-2"}); err == nil {
		t.Fatal("a second drain of the Draining n2 was accepted")
	}
	f.unchanged(before, "a second drain of n2")
	f.refused("a drain of an unregistered capture", ErrNotRegistered, func() error {
		_, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n9"})
		return err
	})
	if f.load().Liveness["n3"].Record.State != model.LivenessAlive {
		t.Fatal("n3 left Alive")
	}
}

// TakeOverDrain gives the drain in progress to a new plan at the next
// epoch; the target stays Draining. It is refused over a record that
// changed since it was read, or for another target.
func TestTakingOverADrainGivesItTheNextEpoch(t *testing.T) {
	f := drainCluster(t)
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-1"}); err != nil {
		t.Fatal(err)
	}
	read := f.load()
	rec, err := f.store.TakeOverDrain(f.ctx, f.fence, read, model.DrainRecord{Target: "n2", PlanID: "drain-2"})
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if rec.Epoch != 2 || st.Drain.Epoch != 2 || st.Drain.PlanID != "drain-2" || f.drainEpoch() != 2 {
		t.Fatalf("after the take-over: returned epoch %d, stored %+v, counter %d", rec.Epoch, st.Drain, f.drainEpoch())
	}
	if st.Liveness["n2"].Revision != read.Liveness["n2"].Revision {
		t.Fatal("the take-over wrote the target's liveness")
	}
	f.refused("a take-over from a drain record read before the last one", ErrStale, func() error {
		_, err := f.store.TakeOverDrain(f.ctx, f.fence, read, model.DrainRecord{Target: "n2", PlanID: "drain-3"})
		return err
	})
	f.refused("a take-over for another target", ErrStale, func() error {
		_, err := f.store.TakeOverDrain(f.ctx, f.fence, st, model.DrainRecord{Target: "n3", PlanID: "drain-3"})
		return err
	})
}

// FinishDrain clears the record and moves the target to Stopping; the
// drain epoch is kept, so the next drain counts on from it.
func TestFinishingADrainStopsTheTargetAndTheNextDrainCountsOn(t *testing.T) {
	f := heldDrain(t, "finishing", func(f *bigFeed, read *State) error { return f.store.FinishDrain(f.ctx, f.fence, read) })
	if err := f.store.FinishDrain(f.ctx, f.fence, f.load()); err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if st.Drain != nil || st.Liveness["n2"].Record.State != model.LivenessStopping {
		t.Fatalf("after the drain finished: record %+v, n2 %s (want none, Stopping)", st.Drain, st.Liveness["n2"].Record.State)
	}
	// With no drain, there is nothing to finish, clear or hold.
	for name, write := range map[string]func() error{
		"finish": func() error { return f.store.FinishDrain(f.ctx, f.fence, st) },
		"clear":  func() error { return f.store.ClearDrain(f.ctx, f.fence, st) },
		"hold":   func() error { return f.store.SetDrainHold(f.ctx, f.fence, st, "x") },
	} {
		before := f.everything()
		if err := write(); err != nil {
			t.Fatalf("%s with no drain: %v", name, err)
		}
		f.unchanged(before, name+" with no drain")
	}
	rec, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n3", PlanID: "drain-2"})
	if err != nil || rec.Epoch != 2 {
		t.Fatalf("the next drain: epoch %d, %v; want 2", rec.Epoch, err)
	}
}

// ClearDrain cancels a drain: the record goes, the target stays Draining
// (nothing takes it back to Alive but a restart); drained again, the new
// drain takes it over (it was refused: "liveness cannot go from Draining
// to Draining"), and no other drain starts meanwhile.
func TestACancelledDrainLeavesItsTargetDraining(t *testing.T) {
	f := heldDrain(t, "cancelling", func(f *bigFeed, read *State) error { return f.store.ClearDrain(f.ctx, f.fence, read) })
	if err := f.store.ClearDrain(f.ctx, f.fence, f.load()); err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if st.Drain != nil || st.Liveness["n2"].Record.State != model.LivenessDraining {
		t.Fatalf("after the cancel: record %+v, n2 %s (want none, Draining)", st.Drain, st.Liveness["n2"].Record.State)
	}
	if rec, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2"}); err != nil || rec.Epoch != 2 {
		t.Fatalf("draining the still Draining n2 again: epoch %d, %v; want it taken over", rec.Epoch, err)
	}
	if st := f.load(); st.Drain == nil || st.Drain.Target != "n2" || st.Liveness["n2"].Record.State != model.LivenessDraining {
		t.Fatalf("after the drain again: record %+v, n2 %s", st.Drain, st.Liveness["n2"].Record.State)
	}
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n3"}); !errors.Is(err, ErrDrainInProgress) {
		t.Fatalf("a drain of n3 while n2's runs: %v", err)
	}
}

// SetDrainHold sets and clears the hold on the record it read, keeping
// the rest of it (epoch, plan); over a record that changed since, it is
// refused.
func TestADrainIsHeldAndReleasedOverTheRecordRead(t *testing.T) {
	f := drainCluster(t)
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-1", BatchSize: 3}); err != nil {
		t.Fatal(err)
	}
	read := f.load()
	if err := f.store.SetDrainHold(f.ctx, f.fence, read, "paused"); err != nil {
		t.Fatal(err)
	}
	held := f.load()
	if d := held.Drain; d.Hold != "paused" || d.Epoch != 1 || d.PlanID != "drain-1" || d.BatchSize != 3 {
		t.Fatalf("the held record: %+v", d)
	}
	f.refused("a release over the record read before the hold", ErrStale, func() error {
		return f.store.SetDrainHold(f.ctx, f.fence, read, "")
	})
	if err := f.store.SetDrainHold(f.ctx, f.fence, held, ""); err != nil {
		t.Fatal(err)
	}
	if d := f.load().Drain; d.Hold != "" || d.Epoch != 1 || d.PlanID != "drain-1" {
		t.Fatalf("the released record: %+v", d)
	}
}

// heldDrain starts a drain of n2 and holds it, and shows that end, an
// ending of the drain from the record as read before the hold, is
// refused and changes nothing.
func heldDrain(t *testing.T, what string, end func(*bigFeed, *State) error) *bigFeed {
	t.Helper()
	f := drainCluster(t)
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n2", PlanID: "drain-1"}); err != nil {
		t.Fatal(err)
	}
	read := f.load()
	if err := f.store.SetDrainHold(f.ctx, f.fence, read, "held by its lag budget"); err != nil {
		t.Fatal(err)
	}
	f.refused(what+" a drain from a record read before its hold", ErrStale, func() error { return end(f, read) })
	return f
}
