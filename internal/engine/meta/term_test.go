package meta

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// FenceFor pins the leader's own liveness into its fence: once the
// leader's liveness moves on (here, it drains itself), its writes are
// refused, though its term key is untouched. A leader that is not Alive,
// or not registered, gets no fence at all.
func TestALeaderWhoseLivenessMovedOnIsFenced(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	f.register("n1")
	full, err := f.store.FenceFor(f.ctx, f.fence, "n1")
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if full.LivenessKey != f.store.Keys().Liveness("n1") || full.LivenessRevision != st.Liveness["n1"].Revision || full.CreateRevision != f.fence.CreateRevision {
		t.Fatalf("the fence of an Alive leader: %+v (its liveness at %d)", full, st.Liveness["n1"].Revision)
	}
	if _, err := f.store.SavePlan(f.ctx, full, "plan-1", "{}", 0); err != nil {
		t.Fatalf("a write under the full fence of an Alive leader: %v", err)
	}
	// The leader's own liveness write lands (the record is as the fence
	// pinned it), and is its last.
	prev, err := f.store.SetLiveness(f.ctx, "n1", model.LivenessDraining, model.ReasonNormal, full)
	if err != nil || prev.State != model.LivenessAlive {
		t.Fatalf("the leader drains itself: %v (was %s)", err, prev.State)
	}
	f.refused("a write after the leader's liveness moved on", ErrFenced, func() error {
		_, err := f.store.SavePlan(f.ctx, full, "plan-2", "{}", 0)
		return err
	})
	// The bare term fence still holds: only the leader's liveness ended it.
	if _, err := f.store.SavePlan(f.ctx, f.fence, "plan-2", "{}", 0); err != nil {
		t.Fatalf("a write under the term alone: %v", err)
	}
	if _, err := f.store.FenceFor(f.ctx, f.fence, "n1"); err == nil {
		t.Fatal("a Draining leader got a fence; it must give the term back")
	}
	if _, err := f.store.FenceFor(f.ctx, f.fence, "n9"); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("the fence of an unregistered leader: %v, want ErrNotRegistered", err)
	}
}

// A backend outside etcd raises the term with its own epoch: only ever
// upwards, even when the term key is gone; each raise fences the leader
// before it; EndTerm removes only its own term.
func TestRaisedTermsOnlyGoUpAndFenceTheLeaderBefore(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	lease := func() clientv3.LeaseID {
		l, err := f.cli.Grant(f.ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	first, err := f.store.RaiseTerm(f.ctx, 5, "n1", lease())
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if l, ok := st.Leader(); !ok || l.Node != "n1" || l.Fence != first || st.TermEpoch != 5 {
		t.Fatalf("after raising epoch 5: leader %+v (%v), epoch %d; fence %+v", l, ok, st.TermEpoch, first)
	}
	for _, epoch := range []uint64{5, 4} {
		f.refused("a raise to an epoch not above 5", ErrStaleEpoch, func() error {
			_, err := f.store.RaiseTerm(f.ctx, epoch, "n2", lease())
			return err
		})
	}
	second, err := f.store.RaiseTerm(f.ctx, 6, "n2", lease())
	if err != nil {
		t.Fatal(err)
	}
	if second.Epoch() <= first.Epoch() {
		t.Fatalf("the later term's epoch %d is not above the earlier's %d", second.Epoch(), first.Epoch())
	}
	f.refused("the earlier leader's write", ErrFenced, func() error {
		_, err := f.store.SavePlan(f.ctx, first, "plan-1", "{}", 0)
		return err
	})
	if _, err := f.store.SavePlan(f.ctx, second, "plan-1", "{}", 0); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	// The earlier leader stepping down late does not end the new term.
	before := f.everything()
	if err := f.store.EndTerm(f.ctx, first); err != nil {
		t.Fatal(err)
	}
	f.unchanged(before, "the earlier leader's EndTerm")
	if err := f.store.EndTerm(f.ctx, second); err != nil {
		t.Fatal(err)
	}
	st = f.load()
	if l, ok := st.Leader(); ok || st.TermEpoch != 6 {
		t.Fatalf("after the leader stepped down: leader %+v, epoch %d (want none, 6 kept)", l, st.TermEpoch)
	}
	// With no term key at all, an old epoch still cannot come back.
	f.refused("a raise to epoch 6 after the term ended", ErrStaleEpoch, func() error {
		_, err := f.store.RaiseTerm(f.ctx, 6, "n1", lease())
		return err
	})
}
