package meta

import (
	"reflect"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// placedFeed is bigFeed with its partitions placed on n1.
func placedFeed(t *testing.T, tables int) (*bigFeed, []model.RouteEntry) {
	t.Helper()
	f, routes := newBigFeed(t, tables)
	st := f.load()
	var ps []Placement
	for _, r := range routes {
		ps = append(ps, Placement{Route: st.Partitions["big"][r.ID], Node: "n1"})
	}
	if err := f.store.PlacePartitions(f.ctx, f.mf(), ps); err != nil {
		t.Fatal(err)
	}
	return f, routes
}

// An operator's move (RequestMove) marks the partition Draining towards
// its target, pinned there if asked, and drops a split it was asked for;
// the rest of its entry is as it was. Over an entry that changed since
// it was read, it is refused.
func TestAnOperatorsMoveMarksThePartitionDrainingTowardsItsTarget(t *testing.T) {
	f, routes := placedFeed(t, 1)
	read := f.route(routes[0].ID)
	busy := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	// An earlier split request is overtaken by the move.
	if err := f.store.RequestSplit(f.ctx, f.fence, read, "m", busy); err != nil {
		t.Fatal(err)
	}
	f.refused("a move from an entry read before the split request", ErrStale, func() error {
		return f.store.RequestMove(f.ctx, f.fence, read, "n2", true, busy)
	})
	split := f.route(routes[0].ID)
	if err := f.store.RequestMove(f.ctx, f.fence, split, "n2", true, busy); err != nil {
		t.Fatal(err)
	}
	got := f.route(routes[0].ID).Route
	want := read.Route
	want.Status, want.Target, want.Pinned, want.BusySince = model.PartitionDraining, "n2", true, busy
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the entry after the move request:\n got %+v\nwant %+v", got, want)
	}
}

// The maintainer's move (StartMove) marks the partition Draining towards
// its target and ends an operator's pin; over an entry that changed since
// it was read it is refused, so the maintainer and an operator never
// overwrite each other's move.
func TestAMaintainersMoveUnpinsThePartitionAndLosesToAnEarlierWrite(t *testing.T) {
	f, routes := placedFeed(t, 2)
	// Partition 0 was pinned on n1 by an operator's move that completed.
	pinned := f.route(routes[0].ID)
	if err := f.store.RequestMove(f.ctx, f.fence, pinned, "n1", true, time.Now()); err != nil {
		t.Fatal(err)
	}
	pinned = f.route(routes[0].ID)
	if err := f.store.PlacePartition(f.ctx, f.mf(), pinned, "n1", 50, model.CopyProgress{}); err != nil {
		t.Fatal(err)
	}
	pinned = f.route(routes[0].ID)
	if !pinned.Route.Pinned {
		t.Fatal("a graceful placement dropped the operator's pin")
	}
	began := time.Now().UTC()
	if err := f.store.StartMove(f.ctx, f.mf(), pinned, "n3"); err != nil {
		t.Fatal(err)
	}
	got := f.route(routes[0].ID).Route
	if got.Status != model.PartitionDraining || got.Target != "n3" || got.Pinned || got.BusySince.Before(began) || got.Node != "n1" || got.Epoch != pinned.Route.Epoch {
		t.Fatalf("the entry after the maintainer's move: %+v", got)
	}

	// Both read partition 1; the operator writes first.
	read := f.route(routes[1].ID)
	if err := f.store.RequestMove(f.ctx, f.fence, read, "n2", true, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.refused("the maintainer's move over the operator's", ErrStale, func() error {
		return f.store.StartMove(f.ctx, f.mf(), read, "n3")
	})
	if got := f.route(routes[1].ID).Route; got.Target != "n2" || !got.Pinned {
		t.Fatalf("the operator's move was overwritten: %+v", got)
	}
}

// A move completes with PlacePartition: the partition is Active on its
// target at the next epoch, from the final position it was handed, and
// its history says it moved gracefully. Over an entry that changed since
// it was read, the placement is refused.
func TestAPlacementCompletesAMoveFromTheFinalPosition(t *testing.T) {
	f, routes := placedFeed(t, 1)
	busy := time.Now().UTC().Add(-time.Second)
	if err := f.store.RequestMove(f.ctx, f.fence, f.route(routes[0].ID), "n2", false, busy); err != nil {
		t.Fatal(err)
	}
	moving := f.route(routes[0].ID)
	copied := model.CopyProgress{Done: true, Rows: 9}
	if err := f.store.PlacePartition(f.ctx, f.mf(), moving, "n2", 70, copied); err != nil {
		t.Fatal(err)
	}
	got := f.route(routes[0].ID).Route
	if got.Node != "n2" || got.Status != model.PartitionActive || got.Epoch != moving.Route.Epoch+1 || got.Start != 70 ||
		got.StartCopy != copied || got.Target != "" || !got.BusySince.IsZero() {
		t.Fatalf("the entry after the move: %+v", got)
	}
	ev := got.History[len(got.History)-1]
	if ev.Kind != "moved" || ev.From != "n1" || ev.To != "n2" || !ev.Graceful || ev.Busy < time.Second {
		t.Fatalf("the move's history: %+v", ev)
	}
	f.refused("a second placement from the entry read before the first", ErrStale, func() error {
		return f.store.PlacePartition(f.ctx, f.mf(), moving, "n3", 0, model.CopyProgress{})
	})
}
