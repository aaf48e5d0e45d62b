package meta

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

func spans(table string, n int) []model.Span {
	return model.SplitEvenly(table, n, func(i int) string { return fmt.Sprintf("k%04d", i) })
}

// A changefeed's partitions take their ids from the cluster's counter,
// after those given out before, and start Active and unplaced, at the
// changefeed's start. A second changefeed of the same name is refused.
func TestCreatingAChangefeedTakesIDsFromTheClusterCounter(t *testing.T) {
	f, _ := newBigFeed(t, 2) // p1, p2
	routes, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "second", StartTs: 40}, nil, spans("orders", 3))
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	for i, r := range routes {
		got := st.Partitions["second"][fmt.Sprintf("p%d", i+3)].Route
		if got.ID != r.ID || got.Span != r.Span || got.Status != model.PartitionActive || got.Node != "" {
			t.Fatalf("partition %d: stored %+v, returned %+v", i, got, r)
		}
	}
	if e := st.Changefeeds["second"]; e == nil || e.Status.State != model.ChangefeedNormal || e.Status.CheckpointTs != 40 {
		t.Fatalf("the changefeed: %+v", e)
	}
	f.refused("a second changefeed named second", ErrChangefeedExists, func() error {
		_, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "second"}, nil, spans("other", 2))
		return err
	})
}

// A changefeed too large for one transaction is written in steps, whole,
// and clears what an interrupted create of its name left; once it
// exists, creating it again is refused before any step.
func TestALargeChangefeedIsCreatedInStepsAndClearsAnInterruptedCreate(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	stray := f.store.Keys().Partition("large", "p999")
	if _, err := f.cli.Put(f.ctx, stray, `{"id":"p999","changefeed":"large"}`); err != nil {
		t.Fatal(err)
	}
	routes, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "large", StartTs: 5}, nil, spans("events", 250))
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if len(routes) != 250 || len(st.Partitions["large"]) != 250 || st.Changefeeds["large"] == nil {
		t.Fatalf("%d routes returned, %d stored, changefeed %v", len(routes), len(st.Partitions["large"]), st.Changefeeds["large"])
	}
	if _, ok := st.Partitions["large"]["p999"]; ok {
		t.Fatal("the interrupted create's partition is still there")
	}
	if err := model.CheckCoverage(spansOf(st.Partitions["large"])); err != nil {
		t.Fatal(err)
	}
	f.refused("a second large changefeed of the same name", ErrChangefeedExists, func() error {
		_, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "large"}, nil, spans("events", 250))
		return err
	})
}

func spansOf(m map[string]RouteRecord) []model.Span {
	var out []model.Span
	for _, r := range m {
		out = append(out, r.Route.Span)
	}
	return out
}

// Removing a changefeed removes all of it (info, status, positions,
// routes, barriers, partition states) and nothing of a changefeed whose
// name it prefixes, and records its source cleanup in the same write. A
// changefeed that does not exist is not found.
func TestRemovingAChangefeedRemovesAllOfItAndRecordsItsCleanup(t *testing.T) {
	f, routes := newBigFeed(t, 2)
	if _, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "big2"}, nil, spans("t", 1)); err != nil {
		t.Fatal(err)
	}
	f.save(f.load(), 10, at(routes, 10))
	if err := f.store.SetBarrier(f.ctx, f.mf(), "big", model.Barrier{Table: "t000000", DDLTs: 9, Writer: routes[0].ID}, 0); err != nil {
		t.Fatal(err)
	}
	for _, cf := range []model.ChangefeedID{"big", "big2"} {
		if err := f.store.SaveCheckpoint(f.ctx, cf, "p1", 1, []byte("state")); err != nil {
			t.Fatal(err)
		}
	}
	st, mf := f.load(), f.mf()
	k := f.store.Keys()
	of := []string{k.ChangefeedPrefix("big"), k.Partitions("big"), k.BarriersPrefix() + "big/", k.Checkpoint("big", "")}
	keep, gone := map[string]string{}, map[string]bool{}
	for key, v := range f.everything() {
		keep[key] = v
		for _, prefix := range of {
			if strings.HasPrefix(key, prefix) {
				delete(keep, key)
				gone[prefix] = true
			}
		}
	}
	if len(gone) != len(of) {
		t.Fatalf("the changefeed has keys under %d of its %d prefixes before its removal", len(gone), len(of))
	}
	cleanup := &model.SourceCleanup{Changefeed: "big", Source: "postgres://db/slot", Since: time.Now().UTC()}
	if err := f.store.RemoveChangefeed(f.ctx, f.fence, "big", cleanup); err != nil {
		t.Fatal(err)
	}
	after := f.everything()
	c, ok := f.load().Cleanups["big"]
	if !ok || c.Record.Source != cleanup.Source {
		t.Fatalf("the cleanup: %+v (%v)", c, ok)
	}
	delete(after, k.Cleanup("big"))
	if !reflect.DeepEqual(after, keep) {
		t.Fatalf("after removing big etcd holds\n%v\nwant\n%v", after, keep)
	}
	f.refused("removing a changefeed that is gone", ErrChangefeedNotFound, func() error {
		return f.store.RemoveChangefeed(f.ctx, f.fence, "big", nil)
	})
	// Its maintainer, not yet told, cannot write any of it back.
	f.refused("the removed changefeed's maintainer saving its positions", ErrStale, func() error {
		return f.store.SaveProgress(f.ctx, mf, st, st.Changefeeds["big"], 20, nil, at(routes, 20))
	})
	f.refused("the removed changefeed's maintainer placing a partition", ErrStale, func() error {
		return f.store.PlacePartition(f.ctx, mf, st.Partitions["big"][routes[0].ID], "n2", 0, model.CopyProgress{})
	})
	// Created again under its name, it is told apart from the one
	// removed (a plan computed before must not act on it): its info was
	// created at a later revision, and stays so in a watcher's view.
	was := st.Changefeeds["big"].InfoCreated
	if was == 0 {
		t.Fatal("the changefeed's info has no create revision")
	}
	if _, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "big"}, nil, spans("t", 1)); err != nil {
		t.Fatal(err)
	}
	now := f.load().Changefeeds["big"]
	if now == nil || now.InfoCreated <= was || now.InfoCreated != now.InfoRevision {
		t.Fatalf("created again: %+v, the first one's info created at %d", now, was)
	}
	if w := f.follow().Changefeeds["big"]; w == nil || w.InfoCreated != now.InfoCreated {
		t.Fatalf("the watched state has the new changefeed's info created at %+v, a load at %d", w, now.InfoCreated)
	}
}

// A resume clears the changefeed's error, starts its reader again (the
// next run) and forgets the issues of the tables named (all, if none);
// it lands only over the status it read.
func TestResumingAChangefeedClearsItsErrorAndTheNamedTablesIssues(t *testing.T) {
	f, _ := newBigFeed(t, 1)
	e := f.load().Changefeeds["big"]
	if err := f.store.SetTableIssues(f.ctx, f.mf(), e, []model.TableIssue{{Table: "a", State: model.TableHeld}, {Table: "b", State: model.TableHeld}}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.FailChangefeed(f.ctx, f.mf(), f.load().Changefeeds["big"], "bad DDL"); err != nil {
		t.Fatal(err)
	}
	failed := f.load().Changefeeds["big"]
	if err := f.store.SetChangefeedState(f.ctx, f.fence, failed, model.ChangefeedNormal, "alice", "a"); err != nil {
		t.Fatal(err)
	}
	got := f.load().Changefeeds["big"].Status
	if got.State != model.ChangefeedNormal || got.Error != "" || got.Run != failed.Status.Run+1 || len(got.Tables) != 1 || got.Tables[0].Table != "b" {
		t.Fatalf("after resuming table a: %+v", got)
	}
	if in := got.Incidents[len(got.Incidents)-1]; in.Kind != "resumed" || in.Reason != "by alice" {
		t.Fatalf("the resume's incident: %+v", in)
	}
	f.refused("a pause over the status read before the resume", ErrStale, func() error {
		return f.store.SetChangefeedState(f.ctx, f.fence, failed, model.ChangefeedPaused, "bob")
	})
	if err := f.store.SetChangefeedState(f.ctx, f.fence, f.load().Changefeeds["big"], model.ChangefeedNormal, ""); err != nil {
		t.Fatal(err)
	}
	if got := f.load().Changefeeds["big"].Status; len(got.Tables) != 0 || got.Run != failed.Status.Run+2 {
		t.Fatalf("after resuming all tables: %+v", got)
	}
}

// A tables update (or re-snapshot) written over a routing table that
// changed since it was read — a split's new half, a move — is stale and
// changes nothing: the partitions it removes or replaces were computed
// from the old routing table, and the split's half was left beside them.
// Over an unchanged routing table it is written.
func TestATablesUpdateOverARoutingTableChangedSinceItsReadIsStale(t *testing.T) {
	f, routes := newBigFeed(t, 2) // p1, p2
	st := f.load()
	read := st.Revision
	e := st.Changefeeds["big"]
	// A split writes its new half after the update read the routes.
	half := routes[0]
	half.ID = "p9"
	if _, err := f.cli.Put(f.ctx, f.store.keys.Partition("big", "p9"), mustJSON(half)); err != nil {
		t.Fatal(err)
	}
	f.refused("an update over a routing table split since", ErrStale, func() error {
		_, err := f.store.UpdateTables(f.ctx, f.fence, e, TablesUpdate{Info: e.Info, Remove: []string{routes[0].ID}, RoutesAt: read})
		return err
	})
	st = f.load()
	e = st.Changefeeds["big"]
	if _, err := f.store.UpdateTables(f.ctx, f.fence, e, TablesUpdate{Info: e.Info, Remove: []string{routes[0].ID, "p9"}, RoutesAt: st.Revision}); err != nil {
		t.Fatalf("an update over the routing table as it is: %v", err)
	}
	if got := f.load().Partitions["big"]; len(got) != 1 {
		t.Fatalf("after the update: %d partitions, want 1", len(got))
	}
}
