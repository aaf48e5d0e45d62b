package meta

import (
	"errors"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Helpers shared by the tests of meta's writes, over bigFeed
// (progress_test.go): a changefeed "big" with its maintainer on n1, under
// a coordinator term whose key is /term.

// everything reads every key etcd holds, with its value and mod-revision:
// two equal readings mean that no write landed in between.
func (f *bigFeed) everything() map[string]string {
	f.t.Helper()
	resp, err := f.cli.Get(f.ctx, "", clientv3.WithPrefix())
	if err != nil {
		f.t.Fatal(err)
	}
	m := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = fmt.Sprintf("%s @%d", kv.Value, kv.ModRevision)
	}
	return m
}

// unchanged fails the test unless etcd holds exactly before: a refused
// write must leave no trace, not even part of itself.
func (f *bigFeed) unchanged(before map[string]string, what string) {
	f.t.Helper()
	after := f.everything()
	var diffs []string
	for k, v := range after {
		if was, ok := before[k]; !ok {
			diffs = append(diffs, "wrote "+k)
		} else if was != v {
			diffs = append(diffs, "rewrote "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			diffs = append(diffs, "deleted "+k)
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		f.t.Errorf("%s was refused but changed etcd: %v", what, diffs)
	}
}

// refused runs a write that must fail with want (errors.Is), and checks
// that it changed nothing in etcd.
func (f *bigFeed) refused(what string, want error, write func() error) {
	f.t.Helper()
	before := f.everything()
	if err := write(); !errors.Is(err, want) {
		f.t.Fatalf("%s: got %v, want %v", what, err, want)
	}
	f.unchanged(before, what)
}

// register registers a node on a lease of its own, as an agent does; it
// comes up Alive. It returns the lease (the node's incarnation).
func (f *bigFeed) register(id model.NodeID) clientv3.LeaseID {
	f.t.Helper()
	lease, err := f.cli.Grant(f.ctx, 60)
	if err != nil {
		f.t.Fatal(err)
	}
	info := model.NodeInfo{ID: id, Address: string(id) + ":8300", PID: 4242, StartedAt: time.Now().UTC()}
	if err := f.store.RegisterNode(f.ctx, info, lease.ID, Previous{}); err != nil {
		f.t.Fatalf("register %s: %v", id, err)
	}
	return lease.ID
}

// newTerm ends the coordinator's term and begins the next one, as an
// election does: the term key is deleted and created again. It returns
// the new term's fence; f.fence is left as the old one.
func (f *bigFeed) newTerm() Fence {
	f.t.Helper()
	if _, err := f.cli.Delete(f.ctx, f.fence.Key); err != nil {
		f.t.Fatal(err)
	}
	put, err := f.cli.Put(f.ctx, f.fence.Key, "next-coordinator")
	if err != nil {
		f.t.Fatal(err)
	}
	return Fence{Key: f.fence.Key, CreateRevision: put.Header.Revision}
}

// route is a partition's routing entry as etcd holds it now.
func (f *bigFeed) route(pid string) RouteRecord {
	f.t.Helper()
	r, ok := f.load().Partitions["big"][pid]
	if !ok {
		f.t.Fatalf("no route %s", pid)
	}
	return r
}

// mf is the fence of the changefeed's maintainer placement now.
func (f *bigFeed) mf() MaintainerFence {
	f.t.Helper()
	return f.load().Changefeeds["big"].FenceOf(f.store.Keys())
}

// errAny stands for an error the store makes up on the spot (no
// sentinel): orAny turns any error into it, so refused can check it.
var errAny = errors.New("some error")

func orAny(err error) error {
	if err != nil {
		return errAny
	}
	return nil
}
