package meta

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// splitFeed is placedFeed (move_store_test.go) with two tables, their
// positions saved at 100; the first has copied its snapshot up to "q".
func splitFeed(t *testing.T) (*bigFeed, []model.RouteEntry, model.ProgressTable) {
	t.Helper()
	f, routes := placedFeed(t, 2)
	table := at(routes, 100)
	p := table[routes[0].ID]
	p.Copy = model.CopyProgress{}.CopiedThrough("q")
	table[routes[0].ID] = p
	st := f.load()
	if err := f.store.SaveProgress(f.ctx, f.mf(), st, st.Changefeeds["big"], 100, nil, table); err != nil {
		t.Fatal(err)
	}
	return f, routes, table
}

// RequestSplit marks the partition busy on its own node with where to
// cut; the rest of its entry is as it was. A key outside the partition,
// or an entry that changed since it was read, is refused.
func TestRequestingASplitMarksThePartitionBusyWithItsKey(t *testing.T) {
	f, routes, _ := splitFeed(t)
	r := f.route(routes[0].ID)
	busy := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.refused("a split at the partition's start", errAny, func() error {
		return orAny(f.store.RequestSplit(f.ctx, f.fence, r, "", busy))
	})
	if err := f.store.RequestSplit(f.ctx, f.fence, r, "m", busy); err != nil {
		t.Fatal(err)
	}
	got := f.route(routes[0].ID).Route
	want := r.Route
	want.Status, want.Target, want.SplitKey, want.BusySince = model.PartitionDraining, "n1", "m", busy
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the entry after the split request:\n got %+v\nwant %+v", got, want)
	}
	f.refused("a split requested over an entry read before the last request", ErrStale, func() error {
		return f.store.RequestSplit(f.ctx, f.fence, r, "k", busy)
	})
}

// SplitPartition replaces the busy partition by its two halves in one
// write: the lower half keeps the id at the next epoch, the upper half
// gets the next id from the cluster counter; both are Active on the node
// from the final position, and the positions of both (with the snapshot
// copy cut at the key) are stored with them.
func TestSplittingAPartitionWritesBothHalvesAndTheirPositionsAtOnce(t *testing.T) {
	f, routes, table := splitFeed(t)
	busy := time.Now().UTC().Add(-2 * time.Second)
	if err := f.store.RequestSplit(f.ctx, f.fence, f.route(routes[0].ID), "m", busy); err != nil {
		t.Fatal(err)
	}
	r := f.route(routes[0].ID)
	var hooked []string
	upper, err := f.store.SplitPartition(f.ctx, f.mf(), r, "n2", 300, table, busy.Add(2*time.Second), func(id string) error {
		hooked = append(hooked, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if upper != "p3" || !reflect.DeepEqual(hooked, []string{"p3"}) {
		t.Fatalf("the upper half is %q (hook saw %v), want p3, the counter's next", upper, hooked)
	}
	st := f.load()
	lo, hi := st.Partitions["big"][r.Route.ID].Route, st.Partitions["big"][upper].Route
	if lo.Span != (model.Span{Table: "t000000", End: "m"}) || hi.Span != (model.Span{Table: "t000000", Start: "m"}) {
		t.Fatalf("the halves' spans: %v and %v", lo.Span, hi.Span)
	}
	for _, h := range []model.RouteEntry{lo, hi} {
		if h.Node != "n2" || h.Status != model.PartitionActive || h.Start != 300 || h.Target != "" || h.SplitKey != "" || !h.BusySince.IsZero() {
			t.Fatalf("half %s is not Active on n2 from 300: %+v", h.ID, h)
		}
	}
	if lo.Epoch != r.Route.Epoch+1 || hi.Epoch != 1 {
		t.Fatalf("epochs %d and %d, want %d and 1", lo.Epoch, hi.Epoch, r.Route.Epoch+1)
	}
	// The snapshot copy went up to "q": the lower half is copied whole,
	// the upper goes on from "q".
	if !lo.StartCopy.Done || hi.StartCopy.Done || hi.StartCopy.To != "q\x00" {
		t.Fatalf("the halves start their copy at %+v and %+v", lo.StartCopy, hi.StartCopy)
	}
	ev := lo.History[len(lo.History)-1]
	if ev.Kind != "split" || !ev.Graceful || ev.Busy != 2*time.Second || len(hi.History) != 1 || hi.History[0].Kind != "split-from" {
		t.Fatalf("the halves' history: %+v and %+v", lo.History, hi.History)
	}
	pos := st.Progress["big"]
	if p := pos[lo.ID].Progress; p.Checkpoint != 300 || p.Node != "n2" || p.Epoch != lo.Epoch || !p.Copy.Done {
		t.Fatalf("the lower half's position: %+v", p)
	}
	if p := pos[hi.ID].Progress; p.Checkpoint != 300 || p.Node != "n2" || p.Epoch != 1 || p.Copy.To != "q\x00" {
		t.Fatalf("the upper half's position: %+v", p)
	}
	if p := pos[routes[1].ID].Progress; p != table[routes[1].ID] {
		t.Fatalf("the other partition's position changed: %+v", p)
	}
	// One transaction: every key the split wrote has the same revision.
	k := f.store.Keys()
	keys := []string{k.Partition("big", lo.ID), k.Partition("big", hi.ID), k.PartitionIDs(),
		k.ChangefeedProgressShard("big", ProgressShard(lo.ID)), k.ChangefeedProgressShard("big", ProgressShard(hi.ID))}
	revs := map[int64][]string{}
	for _, key := range keys {
		resp, err := f.cli.Get(f.ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v", key, err)
		}
		revs[resp.Kvs[0].ModRevision] = append(revs[resp.Kvs[0].ModRevision], key)
	}
	if len(revs) != 1 {
		t.Fatalf("the split was written in %d transactions: %v", len(revs), revs)
	}
}

// After the partition's source died (no final position, start 0), both
// halves resume from the whole's last persisted position.
func TestASplitWithoutAFinalPositionResumesBothHalvesFromTheWhole(t *testing.T) {
	f, routes, table := splitFeed(t)
	if err := f.store.RequestSplit(f.ctx, f.fence, f.route(routes[1].ID), "g", time.Now()); err != nil {
		t.Fatal(err)
	}
	upper, err := f.store.SplitPartition(f.ctx, f.mf(), f.route(routes[1].ID), "n3", 0, table, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	for _, id := range []string{routes[1].ID, upper} {
		r, p := st.Partitions["big"][id].Route, st.Progress["big"][id].Progress
		if r.Start != 0 || p.Checkpoint != 100 || p.Node != "n3" {
			t.Fatalf("half %s: starts at %d, position %+v; want from its last position 100", id, r.Start, p)
		}
	}
}

// A split is refused, and writes nothing (no half, no id taken), when the
// entry changed since it was read, when its hook fails, or when the
// entry's split key is not inside it.
func TestARefusedSplitWritesNothing(t *testing.T) {
	f, routes, table := splitFeed(t)
	if err := f.store.RequestSplit(f.ctx, f.fence, f.route(routes[0].ID), "m", time.Now()); err != nil {
		t.Fatal(err)
	}
	read := f.route(routes[0].ID)
	// The operator moves the split point meanwhile.
	if err := f.store.RequestSplit(f.ctx, f.fence, read, "k", time.Now()); err != nil {
		t.Fatal(err)
	}
	f.refused("a split of an entry that changed since it was read", ErrStale, func() error {
		_, err := f.store.SplitPartition(f.ctx, f.mf(), read, "n1", 300, table, time.Now(), nil)
		return err
	})
	hookErr := errors.New("the checkpoint store is down")
	f.refused("a split whose hook failed", hookErr, func() error {
		_, err := f.store.SplitPartition(f.ctx, f.mf(), f.route(routes[0].ID), "n1", 300, table, time.Now(), func(string) error { return hookErr })
		return err
	})
	bad := f.route(routes[0].ID)
	bad.Route.Span.End, bad.Route.SplitKey = "k", "z"
	f.refused("a split at a key past the partition's end", errAny, func() error {
		_, err := f.store.SplitPartition(f.ctx, f.mf(), bad, "n1", 300, table, time.Now(), nil)
		return orAny(err)
	})
}
