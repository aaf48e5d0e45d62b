package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A burst of writes is taken into fewer published states when copying the
// state is costly (here: every change spaced by 50 ms), and nothing is lost
// or reordered: each published state is one etcd had, at a higher revision
// than the one before, and the last holds every write, as a fresh load of
// etcd does.
func TestViewSpacesABurstWithoutLosingAWrite(t *testing.T) {
	ctx, cli, store, v := runView(t, func(v *View) { v.space = func(int, time.Duration) time.Duration { return 50 * time.Millisecond } })

	const cf, writes = model.ChangefeedID("big"), 400
	var revs []int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			ch := v.Changed()
			st := v.State()
			if n := len(revs); n == 0 || revs[n-1] != st.Revision {
				revs = append(revs, st.Revision)
			}
			if len(st.Partitions[cf]) == writes {
				return
			}
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
				return
			}
		}
	}()
	for i := range writes {
		r := model.RouteEntry{Changefeed: cf, ID: fmt.Sprintf("p%04d", i), Node: "capture-1", Epoch: 1}
		b, _ := json.Marshal(r)
		if _, err := cli.Put(ctx, store.Keys().Partition(cf, r.ID), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	<-watched

	last := v.State()
	if got := len(last.Partitions[cf]); got != writes {
		t.Fatalf("the view holds %d of %d routes", got, writes)
	}
	fresh, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last.Revision != fresh.Revision || len(fresh.Partitions[cf]) != writes {
		t.Fatalf("the view is at revision %d with %d routes, etcd at %d with %d", last.Revision, len(last.Partitions[cf]), fresh.Revision, len(fresh.Partitions[cf]))
	}
	for id, r := range fresh.Partitions[cf] {
		if got := last.Partitions[cf][id]; got.Revision != r.Revision || got.Route.ID != r.Route.ID || got.Route.Node != r.Route.Node {
			t.Fatalf("route %s: view %+v, etcd %+v", id, last.Partitions[cf][id], r)
		}
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("published revisions not increasing: %v", revs)
		}
	}
	// 400 writes one after another take far longer than 50 ms; spaced,
	// they are published in a few dozen states, not one each.
	if len(revs) > writes/2 {
		t.Fatalf("%d states published for %d writes: the burst was not spaced", len(revs), writes)
	}
	t.Logf("%d writes published in %d states", writes, len(revs))
}

// A behaviour that nodes of an earlier version would misread is used
// only while every registered node has it: a node registered as an
// earlier version does (without features) turns it off for all, and its
// leaving turns it on again once it has been gone for the view's hold
// (it may be restarting in place).
func TestAFeatureIsEveryNodesOrNone(t *testing.T) {
	const hold = 700 * time.Millisecond
	ctx, cli, store, v := runView(t, func(v *View) { v.featureHold = hold })
	if v.AllNodesHave(model.FeatureStorageNotes) {
		t.Fatal("a view that knows no node says every node has a feature")
	}
	register := func(id model.NodeID, features []string) {
		t.Helper()
		b, _ := json.Marshal(model.NodeInfo{ID: id, Version: "v", Features: features})
		if _, err := cli.Put(ctx, store.Keys().Node(id), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	until := func(what string, want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for v.AllNodesHave(model.FeatureStorageNotes) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: every node has the feature is not %v", what, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	register("capture-1", model.BuildFeatures)
	register("capture-2", model.BuildFeatures)
	until("two nodes of this version", true)
	register("capture-3", nil)
	until("a node of an earlier version joined", false)
	left := time.Now()
	if _, err := cli.Delete(ctx, store.Keys().Node("capture-3")); err != nil {
		t.Fatal(err)
	}
	for _, ok := v.State().Nodes["capture-3"]; ok; _, ok = v.State().Nodes["capture-3"] {
		time.Sleep(5 * time.Millisecond)
	}
	if v.AllNodesHave(model.FeatureStorageNotes) && time.Since(left) < hold/2 {
		t.Fatalf("the feature is on again %v after the earlier node left, within the hold of %v", time.Since(left), hold)
	}
	until("the earlier node left", true)
}

// runView starts a view of a fresh etcd (set, if given, adjusts it
// first) until the test ends, and waits for its first load.
func runView(t *testing.T, set func(*View)) (context.Context, *clientv3.Client, *meta.Store, *View) {
	t.Helper()
	_, cli := etcdtest.Start(t)
	store := meta.NewStore(cli, "test")
	v := NewView(store, slog.New(slog.DiscardHandler))
	if set != nil {
		set(v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-v.Loaded()
	return ctx, cli, store, v
}
