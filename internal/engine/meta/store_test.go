package meta

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A second process registering a node id that a live process holds is
// refused with ErrNodeIDInUse naming the holder, and changes nothing.
func TestRegisteringANodeIDALiveProcessHoldsIsRefused(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	first := f.register("n1")
	lease, err := f.cli.Grant(f.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	before := f.everything()
	err = f.store.RegisterNode(f.ctx, model.NodeInfo{ID: "n1", Address: "other:8300", PID: 77}, lease.ID, Previous{})
	var inUse *ErrNodeIDInUse
	if !errors.As(err, &inUse) {
		t.Fatalf("a second registration of n1: %v, want ErrNodeIDInUse", err)
	}
	if inUse.Existing.ID != "n1" || inUse.Existing.PID != 4242 || inUse.Existing.Address != "n1:8300" || inUse.Existing.Incarnation != int64(first) {
		t.Fatalf("the refusal names %+v, not the live holder", inUse.Existing)
	}
	f.unchanged(before, "a second registration of n1")
}

// reregister registers a node again on a new lease after its session was
// lost (its lease revoked), passing what it knows of its last incarnation.
func (f *bigFeed) reregister(id model.NodeID, old clientv3.LeaseID, prev Previous) model.LivenessRecord {
	f.t.Helper()
	if _, err := f.cli.Revoke(f.ctx, old); err != nil {
		f.t.Fatal(err)
	}
	lease, err := f.cli.Grant(f.ctx, 60)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.RegisterNode(f.ctx, model.NodeInfo{ID: id}, lease.ID, prev); err != nil {
		f.t.Fatalf("register %s again: %v", id, err)
	}
	l := f.load().Liveness[id].Record
	if l.Incarnation != int64(lease.ID) {
		f.t.Fatalf("%s's liveness is incarnation %d, want the new %d", id, l.Incarnation, lease.ID)
	}
	return l
}

// A process that lost its session and registers again keeps its
// liveness if the record is still its last incarnation's (a Draining
// node stays Draining); if the record went with the session, one that
// says it was stopping comes back Stopping; any other process starts
// Alive.
func TestANodeRegisteringAgainKeepsTheLivenessItHad(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	lease := f.register("n1")
	if _, err := f.store.SetLiveness(f.ctx, "n1", model.LivenessDraining, model.ReasonNormal, f.fence); err != nil {
		t.Fatal(err)
	}
	if l := f.reregister("n1", lease, Previous{Incarnation: int64(lease)}); l.State != model.LivenessDraining {
		t.Fatalf("the same process back after losing its session: %s, want Draining", l.State)
	}

	// A fresh process (no previous incarnation) over that record starts Alive.
	lease = clientv3.LeaseID(f.load().Liveness["n1"].Record.Incarnation)
	if l := f.reregister("n1", lease, Previous{}); l.State != model.LivenessAlive {
		t.Fatalf("a new process of n1: %s, want Alive", l.State)
	}

	// The record is gone (the coordinator removed the departed node's):
	// a process that was stopping says so, and comes back Stopping.
	lease = clientv3.LeaseID(f.load().Liveness["n1"].Record.Incarnation)
	if _, err := f.cli.Delete(f.ctx, f.store.Keys().Liveness("n1")); err != nil {
		t.Fatal(err)
	}
	if l := f.reregister("n1", lease, Previous{Incarnation: int64(lease), Stopping: true}); l.State != model.LivenessStopping {
		t.Fatalf("a drained process back after its record went: %s, want Stopping", l.State)
	}
}

// SetLiveness follows the transition table: it returns the record before
// the change; a state no longer Alive withdraws the node's candidacy in
// the same write; a transition the table forbids, or a node with no
// record, is refused and changes nothing; asking for the state the node
// is in already writes nothing.
func TestSetLivenessFollowsTheTransitionTable(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	f.register("n2")
	f.register("n3")
	if _, err := f.cli.Put(f.ctx, f.store.Keys().ElectionPrefix()+"n2-1", "n2"); err != nil {
		t.Fatal(err)
	}
	prev, err := f.store.SetLiveness(f.ctx, "n2", model.LivenessDraining, model.ReasonNormal, f.fence)
	if err != nil || prev.State != model.LivenessAlive {
		t.Fatalf("Alive to Draining: %v (was %s)", err, prev.State)
	}
	st := f.load()
	if st.Liveness["n2"].Record.State != model.LivenessDraining || st.IsCandidate("n2") {
		t.Fatalf("n2 is %s, candidate %v; want Draining, withdrawn", st.Liveness["n2"].Record.State, st.IsCandidate("n2"))
	}
	before := f.everything()
	if _, err := f.store.SetLiveness(f.ctx, "n2", model.LivenessAlive, model.ReasonNormal, f.fence); err == nil {
		t.Fatal("Draining went back to Alive without the only-node-left reason")
	}
	f.unchanged(before, "Draining to Alive")
	if prev, err := f.store.SetLiveness(f.ctx, "n2", model.LivenessDraining, model.ReasonNormal, f.fence); err != nil || prev.State != model.LivenessDraining {
		t.Fatalf("Draining to Draining: %v (was %s), want ok and nothing written", err, prev.State)
	}
	f.unchanged(before, "Draining to Draining")
	if _, err := f.store.SetLiveness(f.ctx, "n2", model.LivenessStopping, model.ReasonNormal, f.fence); err != nil {
		t.Fatalf("Draining to Stopping: %v", err)
	}
	if _, err := f.store.SetLiveness(f.ctx, "n3", model.LivenessStopping, model.ReasonNormal, f.fence); err != nil {
		t.Fatalf("Alive to Stopping: %v", err)
	}
	f.refused("Stopping to Draining", errAny, func() error {
		_, err := f.store.SetLiveness(f.ctx, "n3", model.LivenessDraining, model.ReasonNormal, f.fence)
		return orAny(err)
	})
	f.refused("a liveness change of a node never registered", ErrNotRegistered, func() error {
		_, err := f.store.SetLiveness(f.ctx, "n9", model.LivenessDraining, model.ReasonNormal, f.fence)
		return err
	})
	if st := f.load(); st.Liveness["n2"].Record.State != model.LivenessStopping || st.Liveness["n3"].Record.State != model.LivenessStopping {
		t.Fatalf("n2 %s, n3 %s; want both Stopping", st.Liveness["n2"].Record.State, st.Liveness["n3"].Record.State)
	}
}

// A node changes only its own incarnation's liveness: a process whose
// record belongs to a newer incarnation of its id is refused.
func TestANodeChangesOnlyItsOwnIncarnationsLiveness(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	old := f.register("n1")
	current := f.reregister("n1", old, Previous{})
	f.refused("the old incarnation stopping itself", ErrNotOwnRecord, func() error {
		_, err := f.store.SetOwnLiveness(f.ctx, "n1", int64(old), model.LivenessStopping)
		return err
	})
	if _, err := f.store.SetOwnLiveness(f.ctx, "n1", current.Incarnation, model.LivenessStopping); err != nil {
		t.Fatal(err)
	}
	if got := f.load().Liveness["n1"].Record; got.State != model.LivenessStopping || got.UpdatedAt.Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("n1 after stopping itself: %+v", got)
	}
}

// The liveness record of a departed node is deleted only while the node
// is unregistered and only if it is the record the caller read: a node
// still registered, or a record that moved on, keeps it.
func TestADepartedNodesLivenessIsDeletedOnlyAsItWasRead(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	lease := f.register("n2")
	alive := f.load().Liveness["n2"].Revision
	before := f.everything()
	if deleted, err := f.store.DeleteStaleLiveness(f.ctx, f.fence, "n2", alive); err != nil || deleted {
		t.Fatalf("deleting the liveness of the registered n2: %v, deleted %v", err, deleted)
	}
	f.unchanged(before, "deleting the liveness of the registered n2")
	// n2 stops, then departs.
	if _, err := f.store.SetLiveness(f.ctx, "n2", model.LivenessStopping, model.ReasonNormal, f.fence); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Revoke(f.ctx, lease); err != nil {
		t.Fatal(err)
	}
	before = f.everything()
	if deleted, err := f.store.DeleteStaleLiveness(f.ctx, f.fence, "n2", alive); err != nil || deleted {
		t.Fatalf("deleting n2's liveness as read before it stopped: %v, deleted %v", err, deleted)
	}
	f.unchanged(before, "deleting n2's liveness as read before it stopped")
	deleted, err := f.store.DeleteStaleLiveness(f.ctx, f.fence, "n2", f.load().Liveness["n2"].Revision)
	if err != nil || !deleted {
		t.Fatalf("deleting the departed n2's liveness: %v, deleted %v", err, deleted)
	}
	if _, ok := f.load().Liveness["n2"]; ok {
		t.Fatal("n2's liveness is still there")
	}
}

// Seed 000's one exception: the only node left, Draining, goes back to
// Alive and its drain record is cleared, in one write by the node itself.
// While another node is registered, it changes nothing.
func TestTheOnlyNodeLeftTakesItsWorkBack(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	f.register("n1")
	other := f.register("n2")
	if _, err := f.store.StartDrain(f.ctx, f.fence, model.DrainRecord{Target: "n1", PlanID: "drain-1"}); err != nil {
		t.Fatal(err)
	}
	before := f.everything()
	if ok, err := f.store.ResetOnlyNodeLeft(f.ctx, "n1"); err != nil || ok {
		t.Fatalf("a reset while n2 is registered: %v, %v", ok, err)
	}
	f.unchanged(before, "a reset while n2 is registered")
	if _, err := f.cli.Revoke(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.store.ResetOnlyNodeLeft(f.ctx, "n1"); err != nil || !ok {
		t.Fatalf("the reset of the only node left: %v, %v", ok, err)
	}
	st := f.load()
	if st.Liveness["n1"].Record.State != model.LivenessAlive || st.Drain != nil {
		t.Fatalf("after the reset: n1 %s, drain %+v; want Alive, none", st.Liveness["n1"].Record.State, st.Drain)
	}
	// Alive already: nothing to reset.
	before = f.everything()
	if ok, err := f.store.ResetOnlyNodeLeft(f.ctx, "n1"); err != nil || ok {
		t.Fatalf("a reset of an Alive node: %v, %v", ok, err)
	}
	f.unchanged(before, "a reset of an Alive node")
}
