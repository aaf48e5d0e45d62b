package meta

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// bigFeed is a changefeed with its maintainer placed, against an embedded
// etcd, and a watched copy of the state that follows every write.
type bigFeed struct {
	t       *testing.T
	ctx     context.Context
	cli     *clientv3.Client
	store   *Store
	fence   Fence
	watched *State
	events  int // watch events applied so far
	watch   clientv3.WatchChan
}

func newBigFeed(t *testing.T, tables int) (*bigFeed, []model.RouteEntry) {
	t.Helper()
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store := NewStore(cli, "big")
	put, err := cli.Put(ctx, "/term", "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	f := &bigFeed{t: t, ctx: ctx, cli: cli, store: store, fence: Fence{Key: "/term", CreateRevision: put.Header.Revision}}
	spans := make([]model.Span, tables)
	for i := range spans {
		spans[i] = model.Span{Table: fmt.Sprintf("t%06d", i)}
	}
	routes, err := store.CreateChangefeed(ctx, f.fence, model.ChangefeedInfo{ID: "big", StartTs: 1}, nil, spans)
	if err != nil {
		t.Fatal(err)
	}
	st := f.load()
	if err := store.PlaceMaintainer(ctx, f.fence, st.Changefeeds["big"], "n1"); err != nil {
		t.Fatal(err)
	}
	f.watched = f.load()
	f.watch = store.Watch(ctx, f.watched.Revision+1)
	return f, routes
}

func (f *bigFeed) load() *State {
	f.t.Helper()
	st, err := f.store.Load(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// follow applies watch responses until the watched state reaches what a
// fresh load reads, and checks that both are the same.
func (f *bigFeed) follow() *State {
	f.t.Helper()
	loaded := f.load()
	for f.watched.Revision < loaded.Revision {
		resp := <-f.watch
		if err := resp.Err(); err != nil {
			f.t.Fatal(err)
		}
		f.events += len(resp.Events)
		f.watched = f.watched.Clone()
		f.watched.Apply(f.store.Keys(), resp)
	}
	if !reflect.DeepEqual(f.watched.Progress["big"], loaded.Progress["big"]) {
		f.t.Fatalf("the watched positions (%d) differ from a fresh load (%d)", len(f.watched.Progress["big"]), len(loaded.Progress["big"]))
	}
	return loaded
}

// at is every route's position at cp, on n1.
func at(routes []model.RouteEntry, cp model.Ts) model.ProgressTable {
	table := model.ProgressTable{}
	for _, r := range routes {
		table[r.ID] = model.Progress{Checkpoint: cp, Node: "n1", Epoch: 1}
	}
	return table
}

func (f *bigFeed) save(st *State, cp model.Ts, table model.ProgressTable) {
	f.t.Helper()
	e := st.Changefeeds["big"]
	if err := f.store.SaveProgress(f.ctx, e.FenceOf(f.store.Keys()), st, e, cp, nil, table); err != nil {
		f.t.Fatalf("save the positions of %d partitions: %v", len(table), err)
	}
}

// A changefeed of 30,000 partitions saves its positions and checkpoint:
// as one key they were over etcd's request limit (the checkpoint stopped
// at about 20,000 partitions). A save after a few partitions moved writes
// only their shards, and every node's watched state equals a fresh load.
func TestThePositionsOfManyPartitionsAreSavedInShards(t *testing.T) {
	f, routes := newBigFeed(t, 30_000)
	table := at(routes, 100)
	st := f.follow()
	f.save(st, 100, table)
	st = f.follow()
	if got := st.Changefeeds["big"].Status.CheckpointTs; got != 100 {
		t.Fatalf("checkpoint %d after the save, want 100", got)
	}
	if len(st.Progress["big"]) != len(routes) {
		t.Fatalf("%d positions stored, want %d", len(st.Progress["big"]), len(routes))
	}

	// Five partitions move on: their shards (at most five) and the status.
	before := f.events
	for _, r := range routes[:5] {
		table[r.ID] = model.Progress{Checkpoint: 200, Node: "n1", Epoch: 1}
	}
	f.save(st, 100, table)
	st = f.follow()
	if n := f.events - before; n < 1 || n > 5 {
		t.Fatalf("%d keys written for 5 moved partitions, want 1 to 5 shards", n)
	}
	for _, r := range routes[:5] {
		if got := st.Progress["big"][r.ID].Progress.Checkpoint; got != 200 {
			t.Fatalf("%s at %d, want 200", r.ID, got)
		}
	}

	// The same positions again: nothing to write.
	before = f.events
	f.save(st, 100, table)
	if st = f.follow(); f.events != before {
		t.Fatalf("%d keys written when nothing moved", f.events-before)
	}

	// A split writes the halves' shards with the routes.
	r := st.Partitions["big"][routes[7].ID]
	r.Route.SplitKey = "m"
	upper, err := f.store.SplitPartition(f.ctx, st.Changefeeds["big"].FenceOf(f.store.Keys()), r, "n1", 300, table, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st = f.follow()
	for _, id := range []string{r.Route.ID, upper} {
		if p := st.Progress["big"][id].Progress; p.Checkpoint != 300 || p.Epoch == 0 {
			t.Fatalf("%s after the split: %+v", id, p)
		}
	}
	if len(st.Progress["big"]) != len(routes)+1 {
		t.Fatalf("%d positions after a split, want %d", len(st.Progress["big"]), len(routes)+1)
	}
}

// A changefeed saved before shards (one progress key) is read as it is,
// and its maintainer's next save rewrites it as shards and deletes it.
func TestPositionsSavedBeforeShardsAreReadAndRewritten(t *testing.T) {
	f, routes := newBigFeed(t, 300)
	old := at(routes, 50)
	if _, err := f.cli.Put(f.ctx, f.store.Keys().ChangefeedProgress("big"), string(mustJSON(old))); err != nil {
		t.Fatal(err)
	}
	st := f.follow()
	if len(st.Progress["big"]) != len(routes) || st.Progress["big"][routes[0].ID].Progress.Checkpoint != 50 {
		t.Fatalf("the old record is not read: %d positions", len(st.Progress["big"]))
	}
	// Nothing moved, but the old record goes: every shard is written.
	f.save(st, 50, old)
	st = f.follow()
	legacy, err := f.cli.Get(f.ctx, f.store.Keys().ChangefeedProgress("big"))
	if err != nil {
		t.Fatal(err)
	}
	if len(legacy.Kvs) != 0 {
		t.Fatal("the record from before shards is still there")
	}
	if len(st.Progress["big"]) != len(routes) || st.Progress["big"][routes[0].ID].Progress.Checkpoint != 50 {
		t.Fatalf("after the rewrite: %d positions", len(st.Progress["big"]))
	}
}

// Applying a watch response copies each changefeed's maps once and never
// changes a state already published.
func TestApplyingChangesNoPublishedState(t *testing.T) {
	f, routes := newBigFeed(t, 500)
	published := f.follow()
	routesBefore := len(published.Partitions["big"])
	table := at(routes, 70)
	f.watched = published
	f.save(published, 70, table)
	f.follow()
	if len(published.Progress["big"]) != 0 || len(published.Partitions["big"]) != routesBefore {
		t.Fatalf("a published state changed: %d positions", len(published.Progress["big"]))
	}
	if len(f.watched.Progress["big"]) != len(routes) {
		t.Fatalf("the next state has %d positions, want %d", len(f.watched.Progress["big"]), len(routes))
	}
}

// A state counts the entries its changes copied since it was cloned (what
// a view spaces its states by): a routing table copied once however many
// of its routes change, and nothing for a change that copies no table.
func TestAStateCountsWhatItsChangesCopied(t *testing.T) {
	f, routes := newBigFeed(t, 300)
	st := f.follow()
	e := st.Changefeeds["big"]
	for _, i := range []int{3, 4} {
		r := st.Partitions["big"][routes[i].ID]
		if err := f.store.PlacePartitions(f.ctx, e.FenceOf(f.store.Keys()), []Placement{{Route: r, Node: "n2"}}); err != nil {
			t.Fatal(err)
		}
	}
	c := st.Clone()
	if c.Copied() != 0 {
		t.Fatalf("a clone copied %d entries before any change", c.Copied())
	}
	for applied := 0; applied < 2; {
		resp := <-f.watch
		for _, ev := range resp.Events {
			if strings.HasPrefix(string(ev.Kv.Key), f.store.Keys().Partitions("big")) {
				applied++
			}
		}
		c.Apply(f.store.Keys(), resp)
	}
	if c.Copied() != len(routes) || c.Partitions["big"][routes[4].ID].Route.Node != "n2" {
		t.Fatalf("two placements copied %d entries, want the table once (%d)", c.Copied(), len(routes))
	}
	if st.Copied() != 0 || st.Partitions["big"][routes[4].ID].Route.Node == "n2" {
		t.Fatal("the state cloned from changed")
	}
}

// A save limited to some partitions writes their shards only, and the
// checkpoint.
func TestASaveLimitedToSomePartitionsWritesTheirShards(t *testing.T) {
	f, routes := newBigFeed(t, 2_000)
	table := at(routes, 10)
	st := f.follow()
	f.save(st, 10, table)
	st = f.follow()
	for _, r := range routes {
		table[r.ID] = model.Progress{Checkpoint: 20, Node: "n1", Epoch: 1}
	}
	table[routes[3].ID] = model.Progress{Checkpoint: 20, Node: "n2", Epoch: 2}
	before := f.events
	e := st.Changefeeds["big"]
	if err := f.store.SaveProgress(f.ctx, e.FenceOf(f.store.Keys()), st, e, 20, nil, table, routes[3].ID); err != nil {
		t.Fatal(err)
	}
	st = f.follow()
	if n := f.events - before; n != 2 {
		t.Fatalf("%d keys written, want 2 (one shard and the status)", n)
	}
	if got := st.Progress["big"][routes[3].ID].Progress; got.Node != "n2" || st.Changefeeds["big"].Status.CheckpointTs != 20 {
		t.Fatalf("after a limited save: %+v, checkpoint %d", got, st.Changefeeds["big"].Status.CheckpointTs)
	}
	// The checkpoint alone.
	before = f.events
	e = st.Changefeeds["big"]
	if err := f.store.SaveProgress(f.ctx, e.FenceOf(f.store.Keys()), st, e, 25, nil, table, ""); err != nil {
		t.Fatal(err)
	}
	if st = f.follow(); f.events-before != 1 || st.Changefeeds["big"].Status.CheckpointTs != 25 {
		t.Fatalf("%d keys written for the checkpoint alone (at %d)", f.events-before, st.Changefeeds["big"].Status.CheckpointTs)
	}
}

// The routing table in order is kept per state and follows every change
// of the table: a placement written and applied from the watch shows in
// the next state's order, and the state it was cloned from keeps its own.
func TestSortedPartitionsFollowTheRoutingTable(t *testing.T) {
	f, _ := newBigFeed(t, 50)
	before := f.watched
	first := before.SortedPartitions("big")
	if len(first) != 50 || first[0].Route.Span.Table != "t000000" || first[49].Route.Span.Table != "t000049" {
		t.Fatalf("sorted: %d routes, first %v", len(first), first[0].Route.Span)
	}
	if again := before.SortedPartitions("big"); &again[0] != &first[0] {
		t.Fatal("the order was computed again for an unchanged routing table")
	}
	// The count per node is kept with the order, and follows it too.
	onN2 := before.ChangefeedPartitionsOn("big", "n2")
	if onN2 != before.PartitionsOn("n2") || onN2 == len(first) {
		t.Fatalf("%d partitions counted on n2, %d by a walk of the table", onN2, before.PartitionsOn("n2"))
	}
	e := before.Changefeeds["big"]
	if err := f.store.PlacePartitions(f.ctx, e.FenceOf(f.store.Keys()), []Placement{{Route: first[7], Node: "n2"}}); err != nil {
		t.Fatal(err)
	}
	f.follow()
	after := f.watched.SortedPartitions("big")
	if after[7].Route.Node != "n2" || first[7].Route.Node == "n2" {
		t.Fatalf("after the placement: %q in the new state, %q in the old; want n2 and unchanged", after[7].Route.Node, first[7].Route.Node)
	}
	if got := before.SortedPartitions("big"); got[7].Route.Node == "n2" {
		t.Fatal("the earlier state's order changed")
	}
	if a, b := f.watched.ChangefeedPartitionsOn("big", "n2"), before.ChangefeedPartitionsOn("big", "n2"); a != onN2+1 || b != onN2 || a != f.watched.PartitionsOn("n2") {
		t.Fatalf("partitions on n2: %d after the placement, %d before it (was %d); want one more after", a, b, onN2)
	}
}

// The last write of a save (the changefeed's status, with its source
// position) goes into a transaction of its own when the positions
// before it leave no room for it under etcd's request limit: with them,
// 0.9 MB of shards and a 0.9 MB status made one request etcd refused
// ("request is too large"), and the checkpoint never advanced.
func TestALargeStatusIsWrittenWhereItFits(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	s := NewStore(cli, "big")
	value := strings.Repeat("x", 100<<10)
	var ops []clientv3.Op
	for i := range 9 {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/shard/%d", i), value))
	}
	status := clientv3.OpPut("/status", strings.Repeat("p", 900<<10))
	if err := s.commitInChunks(ctx, nil, ops, nil, status); err != nil {
		t.Fatalf("0.9 MB of shards and a 0.9 MB status: %v", err)
	}
	for _, k := range []string{"/shard/0", "/shard/8", "/status"} {
		if r, err := cli.Get(ctx, k); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("%s after the save: %v", k, err)
		}
	}
}
