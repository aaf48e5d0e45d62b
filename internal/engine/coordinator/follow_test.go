package coordinator

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Table rules that no longer match a table (renamed or dropped upstream)
// are followed only once the changefeed has written everything the table
// had under its name: its partitions at or past the database's clock of
// the match, or just below where the reader holds it (a rename holds the
// table at its first change under the new name). Followed before, the
// table's changes between where its partitions were and the rename were
// dropped as a removed table's.
func TestRulesWaitForTheReaderToPassARenameOrDrop(t *testing.T) {
	const at = model.Ts(1000)
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: "cf"}}
	st := &meta.State{
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{"cf": {
			"p1": {Route: model.RouteEntry{ID: "p1", Span: model.Span{Table: "public.orders"}}},
			"p2": {Route: model.RouteEntry{ID: "p2", Span: model.Span{Table: "public.orders"}}},
			"p3": {Route: model.RouteEntry{ID: "p3", Span: model.Span{Table: "public.other"}}},
		}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{"cf": {}},
	}
	set := func(pid string, cp model.Ts) {
		st.Progress["cf"][pid] = meta.ProgressRecord{Progress: model.Progress{Checkpoint: cp}}
	}
	set("p1", 1200)
	set("p2", 900)
	set("p3", 10) // another table's: not waited for
	if ok, behind, low := passedLeaving(st, e, map[string]model.Ts{"public.orders": at}); ok || behind != "public.orders" || low != 900 {
		t.Fatalf("a partition below the match: passed %v (%s, lowest %d)", ok, behind, low)
	}
	// Held at its rename (950): the partition stops just below, and has
	// written all the table had under its name.
	e.Status.Tables = []model.TableIssue{{Table: "public.orders", State: model.TableHeld, At: 950}}
	set("p2", 948)
	if ok, _, _ := passedLeaving(st, e, map[string]model.Ts{"public.orders": at}); ok {
		t.Fatal("passed while a partition is below its hold")
	}
	set("p2", 949)
	if ok, behind, _ := passedLeaving(st, e, map[string]model.Ts{"public.orders": at}); !ok {
		t.Fatalf("not passed at the hold: %s", behind)
	}
	// A table joined after the match point is past it by its start.
	e.Status.Tables = nil
	st.Partitions["cf"]["p2"] = meta.RouteRecord{Route: model.RouteEntry{ID: "p2", Span: model.Span{Table: "public.orders"}, Since: 1000}}
	if ok, behind, _ := passedLeaving(st, e, map[string]model.Ts{"public.orders": at}); !ok {
		t.Fatalf("not passed from the partition's start: %s", behind)
	}
	// A source that does not give its clock is not waited for.
	set("p1", 0)
	if ok, _, _ := passedLeaving(st, e, map[string]model.Ts{"public.orders": 0}); !ok {
		t.Fatal("waited without a clock")
	}
}

// The target is the clock of the first round that saw the table leave:
// every later round's clock is later by the changefeed's lag, which its
// partitions never pass.
func TestRulesWaitForTheClockOfTheFirstRoundThatSawTheTableLeave(t *testing.T) {
	c := &Coordinator{log: slog.New(slog.DiscardHandler)}
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: "cf"}}
	st := &meta.State{
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{"cf": {
			"p1": {Route: model.RouteEntry{ID: "p1", Span: model.Span{Table: "public.gone"}}},
		}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{"cf": {"p1": {Progress: model.Progress{Checkpoint: 900}}}},
	}
	waits := map[waitKey]stall{}
	if c.leavingPassed(st, e, []string{"public.gone"}, 1000, waits, stallOf(followStall)) {
		t.Fatal("passed while behind the first round's clock")
	}
	st.Progress["cf"]["p1"] = meta.ProgressRecord{Progress: model.Progress{Checkpoint: 1500}}
	if !c.leavingPassed(st, e, []string{"public.gone"}, 2000, waits, stallOf(followStall)) {
		t.Fatal("not passed at 1500, past the first round's clock (1000), behind this round's (2000)")
	}
	if len(waits) != 0 {
		t.Fatalf("the wait is not forgotten once over: %v", waits)
	}
}

// A table leaving whose partitions stop advancing is let go after
// followStall when its rules no longer match it (a table dropped while
// it was copied never finishes its copy), but only after renameStall for
// a rename that a held table's remedy follows: ended before they pass
// the rename, its last changes under the old name would not be written.
func TestARenameIsNotFollowedBeforeItsPartitionsPassIt(t *testing.T) {
	c := &Coordinator{log: slog.New(slog.DiscardHandler)}
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: "cf"}}
	st := &meta.State{
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{"cf": {
			"p1": {Route: model.RouteEntry{ID: "p1", Span: model.Span{Table: "public.orders"}}},
		}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{"cf": {"p1": {Progress: model.Progress{Checkpoint: 900}}}},
	}
	stalled := func() map[waitKey]stall {
		return map[waitKey]stall{{"cf", "public.orders"}: {target: 1000, low: 900, since: time.Now().Add(-2 * followStall)}}
	}
	if c.leavingPassed(st, e, []string{"public.orders"}, 1000, stalled(), stallOf(renameStall)) {
		t.Fatal("a rename followed while its partitions are behind it, stalled")
	}
	if !c.leavingPassed(st, e, []string{"public.orders"}, 1000, stalled(), stallOf(followStall)) {
		t.Fatal("table rules keep waiting for a table whose partitions do not advance")
	}
}

// A step of the coordinator's own change of a changefeed's tables, or its
// resume, is made only while the change is still the coordinator's: not
// after an operator resumed the changefeed (its run moved; also resumed
// and paused again) or updated it (the record taken over), nor when
// another change is recorded. A record lost to a status write of a
// capture of an earlier version, which does not know it, does not stop
// it: the changefeed would stay paused for good.
func TestAChangeOfTablesGoesOnOnlyWhileItIsTheCoordinators(t *testing.T) {
	since := time.Now().UTC()
	run := uint64(3)
	r := model.Refollow{By: followBy, Steps: [][]string{{"a"}, {"a", "b"}}, Done: 1, Since: since, Run: &run}
	entry := func(state model.ChangefeedState, run uint64, stored *model.Refollow) *meta.ChangefeedEntry {
		return &meta.ChangefeedEntry{Status: model.ChangefeedStatus{State: state, Run: run, Refollow: stored}}
	}
	same := r
	other := r
	other.Since = since.Add(time.Second)
	behind := r
	behind.Done = 0
	old := r
	old.Run = nil
	for _, c := range []struct {
		what   string
		e      *meta.ChangefeedEntry
		goesOn bool
		r      *model.Refollow // the coordinator's, if not r
	}{
		{"as the coordinator left it", entry(model.ChangefeedPaused, 3, &same), true, nil},
		{"its record lost to an earlier version's write", entry(model.ChangefeedPaused, 3, nil), true, nil},
		{"resumed by an operator", entry(model.ChangefeedNormal, 4, nil), false, nil},
		{"resumed and paused again by an operator", entry(model.ChangefeedPaused, 4, nil), false, nil},
		{"updated by an operator", entry(model.ChangefeedPaused, 3, r.TakeOver("ops")), false, nil},
		{"failed", entry(model.ChangefeedFailed, 3, &same), false, nil},
		{"another change", entry(model.ChangefeedPaused, 3, &other), false, nil},
		{"a step not made", entry(model.ChangefeedPaused, 3, &behind), false, nil},
		{"a record from before records kept the run", entry(model.ChangefeedPaused, 5, &old), true, &old},
	} {
		mine := r
		if c.r != nil {
			mine = *c.r
		}
		err := stillRefollowing(c.e, mine)
		if c.goesOn != (err == nil) || err != nil && !errors.Is(err, errMovedOn) {
			t.Errorf("%s: %v; want it to go on: %v", c.what, err, c.goesOn)
		}
	}
}

// Each table leaving a changefeed is waited for by its own stall: one
// let go after followStall (dropped while it copied: it cannot pass the
// drop) does not let go another dropped table, whose end waits until its
// partitions pass the drop, however long. Before, one duration held for
// all of them, and the first table let go ended the wait for all.
func TestEachTableLeavingIsWaitedForByItsOwnStall(t *testing.T) {
	c := &Coordinator{log: slog.New(slog.DiscardHandler)}
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: "cf"}}
	state := func(done model.Ts) *meta.State {
		return &meta.State{
			Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{"cf": {
				"p1": {Route: model.RouteEntry{ID: "p1", Span: model.Span{Table: "public.copying"}}},
				"p2": {Route: model.RouteEntry{ID: "p2", Span: model.Span{Table: "public.dropped"}}},
			}},
			Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{"cf": {
				"p1": {Progress: model.Progress{Checkpoint: 900}},
				"p2": {Progress: model.Progress{Checkpoint: done}},
			}},
		}
	}
	long := time.Now().Add(-time.Hour)
	waits := func() map[waitKey]stall {
		return map[waitKey]stall{
			{"cf", "public.copying"}: {target: 1000, low: 900, since: long},
			{"cf", "public.dropped"}: {target: 1000, low: 950, since: long},
		}
	}
	stalled := func(t string) time.Duration {
		if t == "public.dropped" {
			return dropStall
		}
		return followStall
	}
	tables := []string{"public.copying", "public.dropped"}
	if c.leavingPassed(state(950), e, tables, 1000, waits(), stalled) {
		t.Fatal("a dropped table was let go, behind its drop, with a table that cannot pass its own")
	}
	if !c.leavingPassed(state(1000), e, tables, 1000, waits(), stalled) {
		t.Fatal("the dropped table passed its drop, and the other was stalled for an hour: still waiting")
	}
}

// Two table lists are the same tables in any order, each as many times:
// the coordinator compares a changefeed's tables with its rules' and
// with its remedies' every follow round, for every changefeed.
func TestSameTablesIgnoresOrderAndCountsRepeats(t *testing.T) {
	for _, c := range []struct {
		a, b []string
		same bool
	}{
		{[]string{"a", "b", "c"}, []string{"a", "b", "c"}, true},
		{[]string{"a", "b", "c"}, []string{"c", "a", "b"}, true},
		{nil, []string{}, true},
		{[]string{"a", "b"}, []string{"a", "b", "c"}, false},
		{[]string{"a", "b", "c"}, []string{"a", "b", "d"}, false},
		{[]string{"a", "a", "b"}, []string{"a", "b", "b"}, false},
		{[]string{"a", "b", "a"}, []string{"a", "a", "b"}, true},
	} {
		if got := sameTables(c.a, c.b); got != c.same {
			t.Errorf("sameTables(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
