package coordinator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A drain request takes the plan's first step after saving the plan, and
// so does the executor. On a capture with little on it the executor's
// drain can begin and end before the request's step runs: the request
// then finds no drain record and the capture Stopping. It answers with
// the drain that ran, not "another drain operation is in progress" (the
// chaos suite saw that 409 for a drain that had completed).
func TestADrainThatFinishedBeforeItsRequestAnsweredIsNotRefused(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	store := meta.NewStore(cli, "test")
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RegisterNode(ctx, model.NodeInfo{ID: "capture-2", Address: "capture-2"}, lease.ID, meta.Previous{}); err != nil {
		t.Fatal(err)
	}
	term := leaderTerm(t, cli, store, "capture-1")
	c := New(store, cluster.NewView(store, slog.New(slog.DiscardHandler)), slog.New(slog.DiscardHandler))

	before, err := store.Load(ctx) // what the request read
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Kind: "drain", Target: "capture-2", BatchSize: 1}
	rec := exec.New("drain-capture-2-1", p, "test", time.Now())
	if _, err := store.SavePlan(ctx, term.Fence, rec.ID, rec, 0); err != nil {
		t.Fatal(err)
	}
	// The executor: the drain begins, has nothing to move, and ends.
	ran, err := c.startDrainRecord(ctx, term, before, &rec.Plan, "capture-2", "")
	if err != nil {
		t.Fatal(err)
	}
	during, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.FinishDrain(ctx, term.Fence, during); err != nil {
		t.Fatal(err)
	}
	rec.State = exec.Done
	if _, err := store.SavePlan(ctx, term.Fence, rec.ID, rec, during.Plans[rec.ID].Revision); err != nil {
		t.Fatal(err)
	}

	// The request's step, late, on what it read before.
	got, err := c.startDrainRecord(ctx, term, before, &rec.Plan, "capture-2", "")
	if err != nil {
		t.Fatalf("the request's step: %v", err)
	}
	if got.Epoch != ran.Epoch || got.PlanID != rec.ID {
		t.Fatalf("the request answered drain %+v; the executor ran %+v", got, ran)
	}

	// A drain of another plan still in progress is refused as before.
	other := exec.New("drain-capture-2-2", p, "test", time.Now())
	if _, err := c.startDrainRecord(ctx, term, before, &other.Plan, "capture-2", ""); err == nil {
		t.Fatal("a second drain of a Stopping capture was accepted")
	}
}

// A drain plan computed before a changefeed's maintainer was placed on
// the target (the changefeed created while the drain was being
// submitted; ci15 saw it) has no step for that maintainer. Its last step
// moves it off, to a capture that may take it; otherwise the drain
// waited for it for ever.
func TestADrainMovesAMaintainerItsPlanDidNotList(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	store := meta.NewStore(cli, "test")
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3"} {
		if err := store.RegisterNode(ctx, model.NodeInfo{ID: id, Address: string(id)}, lease.ID, meta.Previous{}); err != nil {
			t.Fatal(err)
		}
	}
	term := leaderTerm(t, cli, store, "capture-1")
	view := cluster.NewView(store, slog.New(slog.DiscardHandler))
	c := New(store, view, slog.New(slog.DiscardHandler))
	if _, err := store.CreateChangefeed(ctx, term.Fence, model.ChangefeedInfo{ID: "late", SourceURI: "gen://?tables=1", SinkURI: "blackhole://"}, nil,
		[]model.Span{{Table: "t0001"}}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PlaceMaintainer(ctx, term.Fence, st.Changefeeds["late"], "capture-2"); err != nil {
		t.Fatal(err)
	}
	if st, err = store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	view.Set(st)

	// The plan's last step, its maintainer moves done (it had none).
	p := &plan.Plan{Kind: plan.KindDrain, Target: "capture-2", BatchSize: 1}
	a := &drainActuator{c: c, term: term}
	if err := a.Begin(ctx, p, plan.Step{Kind: plan.StepSetLiveness, To: "capture-2", Liveness: model.LivenessStopping.String()}); err != nil {
		t.Fatal(err)
	}
	after, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if to := after.Changefeeds["late"].Maintainer.Node; to == "capture-2" || to == "" {
		t.Fatalf("the maintainer the plan did not list is on %q after the drain's last step began; want it moved off capture-2", to)
	}
}
