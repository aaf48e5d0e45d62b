package meta

import "testing"

// A plan's record is written only over the revision it was read at: new
// (revision 0) once, then each save from the revision the last returned.
// A save from any other revision, a lost update, is refused.
func TestAPlanIsSavedOnlyOverTheRevisionItWasReadAt(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	first, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "pending"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.load().Plans["plan-1"]; got.Revision != first || string(got.Value) != `{"state":"pending"}` {
		t.Fatalf("the new plan: %s at %d, SavePlan said %d", got.Value, got.Revision, first)
	}
	f.refused("a second new plan of the same id", ErrStale, func() error {
		_, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "other"}, 0)
		return err
	})
	second, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "running"}, first)
	if err != nil {
		t.Fatal(err)
	}
	if second <= first {
		t.Fatalf("the revision went from %d to %d", first, second)
	}
	f.refused("a save from the revision before the last", ErrStale, func() error {
		_, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "done"}, first)
		return err
	})
	if got := f.load().Plans["plan-1"]; got.Revision != second || string(got.Value) != `{"state":"running"}` {
		t.Fatalf("the plan after the saves: %s at %d, want running at %d", got.Value, got.Revision, second)
	}
	// A plan that does not exist has no revision to save over.
	f.refused("a save over a plan that was never written", ErrStale, func() error {
		_, err := f.store.SavePlan(f.ctx, f.fence, "plan-2", map[string]string{}, second)
		return err
	})
}

// DeletePlan removes a finished plan and its request, only at the revision
// it was read: a plan saved since (it is not finished after all) stays.
func TestAPlanIsDeletedOnlyAtTheRevisionItWasReadAt(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	read, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "done"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.RequestPlan(f.ctx, f.fence, "plan-1", "cancel"); err != nil {
		t.Fatal(err)
	}
	now, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "running"}, read)
	if err != nil {
		t.Fatal(err)
	}
	f.refused("a delete at a revision read before the last save", ErrStale, func() error {
		return f.store.DeletePlan(f.ctx, f.fence, "plan-1", read)
	})
	if err := f.store.DeletePlan(f.ctx, f.fence, "plan-1", now); err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if _, ok := st.Plans["plan-1"]; ok {
		t.Fatal("the plan is still there")
	}
	if _, ok := st.PlanRequests["plan-1"]; ok {
		t.Fatal("the plan's request outlived it")
	}
}

// An operator's request is recorded only for a plan that exists, beside
// its record (which it leaves alone), and is forgotten once acted on.
func TestAPlanRequestNeedsItsPlanAndIsForgotten(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	f.refused("a request for a plan that does not exist", ErrPlanNotFound, func() error {
		return f.store.RequestPlan(f.ctx, f.fence, "plan-1", "pause")
	})
	rev, err := f.store.SavePlan(f.ctx, f.fence, "plan-1", map[string]string{"state": "running"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"pause", "resume"} {
		if err := f.store.RequestPlan(f.ctx, f.fence, "plan-1", req); err != nil {
			t.Fatal(err)
		}
		st := f.load()
		if got := st.PlanRequests["plan-1"]; got != req {
			t.Fatalf("the request is %q, want %q", got, req)
		}
		// The executor's next save is not made stale by a request.
		if st.Plans["plan-1"].Revision != rev {
			t.Fatalf("a request rewrote the plan's record (revision %d, was %d)", st.Plans["plan-1"].Revision, rev)
		}
	}
	if err := f.store.ForgetPlanRequest(f.ctx, f.fence, "plan-1"); err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if _, ok := st.PlanRequests["plan-1"]; ok {
		t.Fatal("the request is still there")
	}
	if st.Plans["plan-1"].Revision != rev {
		t.Fatal("forgetting the request touched the plan")
	}
}
