package meta

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A coordinator deposed by a new term (its term key deleted and created
// again by the next election) still holds the state it read, and every
// coordinator write it makes from that state is refused and changes
// nothing. The same write from the same state under the new term's fence
// lands: the fence, and nothing else, refused it.
//
// Writes that read back why they failed say ErrFenced; those that only
// compare (commit) cannot tell a lost term from a stale object, and say
// ErrStale.
func TestADeposedCoordinatorsWritesAreRefusedAndChangeNothing(t *testing.T) {
	f, routes := newBigFeed(t, 4)
	f.register("n2")
	n3 := f.register("n3")
	// n4 departed: its registration went with its lease, its liveness
	// stayed behind for the coordinator to delete.
	if _, err := f.cli.Revoke(f.ctx, f.register("n4")); err != nil {
		t.Fatal(err)
	}
	old, now := f.fence, f.newTerm()
	plan := json.RawMessage(`{"state":"running"}`)
	for _, w := range []struct {
		name  string
		want  error
		write func(Fence, *State) error
	}{
		{"create a changefeed", ErrFenced, func(fe Fence, _ *State) error {
			_, err := f.store.CreateChangefeed(f.ctx, fe, model.ChangefeedInfo{ID: "other", StartTs: 1}, nil, []model.Span{{Table: "x"}})
			return err
		}},
		{"pause a changefeed", ErrFenced, func(fe Fence, st *State) error {
			return f.store.SetChangefeedState(f.ctx, fe, st.Changefeeds["big"], model.ChangefeedPaused, "ops")
		}},
		{"place a maintainer", ErrFenced, func(fe Fence, st *State) error {
			return f.store.PlaceMaintainer(f.ctx, fe, st.Changefeeds["big"], "n2")
		}},
		{"save a plan", ErrFenced, func(fe Fence, st *State) error {
			_, err := f.store.SavePlan(f.ctx, fe, "plan-1", plan, st.Plans["plan-1"].Revision)
			return err
		}},
		{"request a plan's pause", ErrFenced, func(fe Fence, _ *State) error {
			return f.store.RequestPlan(f.ctx, fe, "plan-1", "pause")
		}},
		{"forget a plan's request", ErrStale, func(fe Fence, _ *State) error {
			return f.store.ForgetPlanRequest(f.ctx, fe, "plan-1")
		}},
		{"delete a plan", ErrStale, func(fe Fence, st *State) error {
			return f.store.DeletePlan(f.ctx, fe, "plan-1", st.Plans["plan-1"].Revision)
		}},
		{"start a drain", ErrFenced, func(fe Fence, _ *State) error {
			_, err := f.store.StartDrain(f.ctx, fe, model.DrainRecord{Target: "n2", PlanID: "drain-1"})
			return err
		}},
		{"hold the drain", ErrStale, func(fe Fence, st *State) error {
			return f.store.SetDrainHold(f.ctx, fe, st, "paused")
		}},
		{"take over the drain", ErrFenced, func(fe Fence, st *State) error {
			_, err := f.store.TakeOverDrain(f.ctx, fe, st, model.DrainRecord{Target: "n2", PlanID: "drain-2"})
			return err
		}},
		{"finish the drain", ErrStale, func(fe Fence, st *State) error {
			return f.store.FinishDrain(f.ctx, fe, st)
		}},
		{"stop a capture", ErrFenced, func(fe Fence, _ *State) error {
			_, err := f.store.SetLiveness(f.ctx, "n3", model.LivenessStopping, model.ReasonNormal, fe)
			return err
		}},
		// Even a write with nothing to change: a deposed coordinator never
		// hears "ok".
		{"stop a capture already stopping", ErrFenced, func(fe Fence, _ *State) error {
			_, err := f.store.SetLiveness(f.ctx, "n3", model.LivenessStopping, model.ReasonNormal, fe)
			return err
		}},
		{"delete a departed capture's liveness", ErrFenced, func(fe Fence, st *State) error {
			_, err := f.store.DeleteStaleLiveness(f.ctx, fe, "n4", st.Liveness["n4"].Revision)
			return err
		}},
		{"restart a capture", ErrStale, func(fe Fence, _ *State) error {
			return f.store.RequestRestart(f.ctx, fe, model.RestartRequest{Node: "n3", Incarnation: int64(n3), PlanID: "rollout-1"})
		}},
		{"move a partition", ErrStale, func(fe Fence, st *State) error {
			return f.store.RequestMove(f.ctx, fe, st.Partitions["big"][routes[0].ID], "n2", true, time.Now())
		}},
		{"split a partition", ErrStale, func(fe Fence, st *State) error {
			return f.store.RequestSplit(f.ctx, fe, st.Partitions["big"][routes[1].ID], "m", time.Now())
		}},
		{"remove a changefeed", ErrFenced, func(fe Fence, _ *State) error {
			return f.store.RemoveChangefeed(f.ctx, fe, "other", nil)
		}},
	} {
		st := f.load()
		f.refused("a deposed coordinator's "+w.name, w.want, func() error { return w.write(old, st) })
		if err := w.write(now, st); err != nil {
			t.Fatalf("%s under the new term, from the same state: %v", w.name, err)
		}
	}
	// The new term's writes all landed.
	st := f.load()
	if _, ok := st.Changefeeds["other"]; ok || st.Drain != nil || len(st.Plans) != 0 {
		t.Fatalf("after the new term's writes: changefeed other %v, drain %+v, plans %d", ok, st.Drain, len(st.Plans))
	}
	if got := st.Liveness["n2"].Record.State; got != model.LivenessStopping {
		t.Fatalf("n2 is %s after its drain finished, want Stopping", got)
	}
	if _, ok := st.Liveness["n4"]; ok || len(st.Restarts) != 1 || st.Changefeeds["big"].Maintainer.Node != "n2" {
		t.Fatalf("after the new term's writes: n4's liveness %v, restarts %d, maintainer %+v", ok, len(st.Restarts), st.Changefeeds["big"].Maintainer)
	}
}

// A term that ended with no successor (its key deleted: the leader's
// session expired) fences as surely as one that was replaced.
func TestACoordinatorWhoseTermKeyIsGoneCannotWrite(t *testing.T) {
	f, routes := newBigFeed(t, 2)
	if _, err := f.cli.Delete(f.ctx, f.fence.Key); err != nil {
		t.Fatal(err)
	}
	st := f.load()
	f.refused("a plan saved after the term ended", ErrFenced, func() error {
		_, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", "{}", 0)
		return err
	})
	f.refused("a maintainer placed after the term ended", ErrFenced, func() error {
		return f.store.PlaceMaintainer(f.ctx, f.fence, st.Changefeeds["big"], "n2")
	})
	f.refused("a move requested after the term ended", ErrStale, func() error {
		return f.store.RequestMove(f.ctx, f.fence, st.Partitions["big"][routes[0].ID], "n2", false, time.Now())
	})
	// A fence that names no term at all is refused before etcd is asked.
	f.refused("a plan saved under no fence", ErrFenced, func() error {
		_, err := f.store.SavePlan(f.ctx, Fence{}, "plan-1", "{}", 0)
		return err
	})
}

// A maintainer whose changefeed was placed on another node (a new
// maintainer epoch) still holds the state it read; every maintainer write
// it makes from it is refused and changes nothing, while the same write
// under the new placement's fence lands.
func TestAMaintainerPlacedElsewhereCannotWrite(t *testing.T) {
	f, routes := newBigFeed(t, 4)
	st := f.load()
	old := st.Changefeeds["big"].FenceOf(f.store.Keys())
	if err := f.store.PlaceMaintainer(f.ctx, f.fence, st.Changefeeds["big"], "n2"); err != nil {
		t.Fatal(err)
	}
	e := f.load().Changefeeds["big"]
	now := e.FenceOf(f.store.Keys())
	if e.Maintainer.Node != "n2" || e.Maintainer.Epoch != old.Epoch+1 || now.Revision == old.Revision {
		t.Fatalf("the maintainer after its new placement: %+v (fence %+v, was %+v)", e.Maintainer, now, old)
	}
	p := func(st *State, i int) RouteRecord { return st.Partitions["big"][routes[i].ID] }
	for _, w := range []struct {
		name  string
		write func(MaintainerFence, *State) error
	}{
		{"place a partition", func(mf MaintainerFence, st *State) error {
			return f.store.PlacePartition(f.ctx, mf, p(st, 0), "n2", 0, model.CopyProgress{})
		}},
		{"save the positions and checkpoint", func(mf MaintainerFence, st *State) error {
			return f.store.SaveProgress(f.ctx, mf, st, st.Changefeeds["big"], 10, nil, at(routes, 10))
		}},
		{"start a move", func(mf MaintainerFence, st *State) error {
			return f.store.StartMove(f.ctx, mf, p(st, 1), "n3")
		}},
		{"return a partition", func(mf MaintainerFence, st *State) error {
			return f.store.ReturnPartition(f.ctx, mf, p(st, 1), "n2", 0, "n3 is gone", time.Now())
		}},
		{"recover a partition", func(mf MaintainerFence, st *State) error {
			return f.store.RecoverPartition(f.ctx, mf, p(st, 2), "its sink failed", time.Now())
		}},
		{"split a partition", func(mf MaintainerFence, st *State) error {
			r := p(st, 3)
			r.Route.SplitKey = "m"
			_, err := f.store.SplitPartition(f.ctx, mf, r, "n2", 20, at(routes, 10), time.Now(), nil)
			return err
		}},
		{"open a DDL barrier", func(mf MaintainerFence, _ *State) error {
			return f.store.SetBarrier(f.ctx, mf, "big", model.Barrier{Table: "t000000", DDLTs: 15, Writer: routes[0].ID}, 0)
		}},
		{"record why the changefeed is stuck", func(mf MaintainerFence, st *State) error {
			return f.store.SetChangefeedError(f.ctx, mf, st.Changefeeds["big"], "sink unreachable")
		}},
		{"fail the changefeed", func(mf MaintainerFence, st *State) error {
			return f.store.FailChangefeed(f.ctx, mf, st.Changefeeds["big"], "bad DDL")
		}},
	} {
		st := f.load()
		f.refused("the old maintainer's "+w.name, ErrStale, func() error { return w.write(old, st) })
		if err := w.write(now, st); err != nil {
			t.Fatalf("%s under the new placement, from the same state: %v", w.name, err)
		}
	}
	st = f.load()
	if got := st.Changefeeds["big"].Status; got.State != model.ChangefeedFailed || got.CheckpointTs != 10 {
		t.Fatalf("the new maintainer's writes did not all land: status %+v", got)
	}
	if len(st.Partitions["big"]) != 5 || len(st.Barriers["big"]) != 1 {
		t.Fatalf("%d partitions and %d barriers after the new maintainer's split and barrier, want 5 and 1", len(st.Partitions["big"]), len(st.Barriers["big"]))
	}
}

// A fence that names a term key but no revision holds nothing, also when
// no coordinator holds the term: compared as it was (create revision 0)
// it held exactly when the term key was absent, and the writes that only
// compare (PlaceMaintainer, RemoveChangefeed, SetChangefeedState, ...)
// landed with no term at all. Likewise a maintainer fence with no
// revision. No caller makes one today; the fence must not depend on that.
func TestAFenceWithNoRevisionFencesNothingIn(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	if _, err := f.cli.Delete(f.ctx, f.fence.Key); err != nil { // no coordinator now
		t.Fatal(err)
	}
	none := Fence{Key: f.fence.Key}
	st := f.load()
	// The writes that check valid() refuse it.
	f.refused("a move under a revision-less fence", ErrFenced, func() error {
		return f.store.RequestMove(f.ctx, none, st.Partitions["big"]["p1"], "n2", false, time.Now())
	})
	// So do those that only compare.
	f.refused("a maintainer placement under a revision-less fence", errAny, func() error {
		return orAny(f.store.PlaceMaintainer(f.ctx, none, st.Changefeeds["big"], "n2"))
	})
	f.refused("a pause under a revision-less fence", errAny, func() error {
		return orAny(f.store.SetChangefeedState(f.ctx, none, f.load().Changefeeds["big"], model.ChangefeedPaused, ""))
	})
	f.refused("a removal under a revision-less fence", errAny, func() error {
		return orAny(f.store.RemoveChangefeed(f.ctx, none, "big", nil))
	})
	// The maintainer's key gone (its changefeed removed): a maintainer
	// fence with no revision writes nothing back.
	e := f.load().Changefeeds["big"]
	if _, err := f.cli.Delete(f.ctx, f.store.Keys().Maintainer("big")); err != nil {
		t.Fatal(err)
	}
	f.refused("an error recorded under a revision-less maintainer fence", ErrStale, func() error {
		return f.store.SetChangefeedError(f.ctx, MaintainerFence{Key: f.store.Keys().Maintainer("big")}, e, "late")
	})
}

// A write that only compares cannot tell a lost term from an object
// changed since it was read: both say ErrStale. WhyRefused asks etcd, so
// that the coordinator steps down on the first refusal of a lost term
// instead of retrying, refused, every second; a stale object under a
// term that holds stays ErrStale (the caller reads again and retries).
func TestARefusalUnderALostTermIsToldFromAStaleObject(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	rev, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"kind": "drain"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"kind": "drain", "v": "2"}, rev); err != nil {
		t.Fatal(err)
	}
	stale := f.store.DeletePlan(f.ctx, f.fence, "plan-1", rev) // the revision before the last save
	if !errors.Is(stale, ErrStale) {
		t.Fatalf("a delete at an old revision: %v, want ErrStale", stale)
	}
	if got := f.store.WhyRefused(f.ctx, f.fence, stale); !errors.Is(got, ErrStale) || errors.Is(got, ErrFenced) {
		t.Fatalf("a stale object under a term that holds: %v, want ErrStale", got)
	}
	for _, other := range []error{nil, ErrPlanNotFound} {
		if got := f.store.WhyRefused(f.ctx, f.fence, other); got != other {
			t.Fatalf("WhyRefused(%v) = %v, want it as it was", other, got)
		}
	}
	old := f.fence
	f.newTerm()
	lost := f.store.ForgetPlanRequest(f.ctx, old, "plan-1")
	if !errors.Is(lost, ErrStale) {
		t.Fatalf("a write that only compares, under a lost term: %v, want ErrStale (what it can tell)", lost)
	}
	if got := f.store.WhyRefused(f.ctx, old, lost); !errors.Is(got, ErrFenced) {
		t.Fatalf("the same refusal explained: %v, want ErrFenced", got)
	}
}
