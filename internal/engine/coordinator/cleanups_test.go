package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A PostgreSQL changefeed removed while the database is down is removed
// all the same, saying its slot is not dropped yet; the cleanup is in
// etcd, a create of the same name is refused meanwhile, and once the
// database is back the coordinator drops the slot and the publication
// and forgets the cleanup.
func TestARemovalWhilePostgresIsDownDropsTheSlotOnceItIsBack(t *testing.T) {
	ctx := context.Background()
	pg := ordersDB(t)
	slots := func() string {
		out, err := pg.Psql(ctx, "postgres", "SELECT count(*) FROM pg_replication_slots; SELECT count(*) FROM pg_publication")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(out), " ")
	}

	f := leading(t)
	c, store, term := f.c, f.store, f.term
	c.ReleaseWait, c.CleanupEvery = 3*time.Second, 200*time.Millisecond

	src := pg.DSN("postgres") + "&tables=public.orders&connect_timeout=2"
	req := CreateRequest{ID: "orders", Source: src, Sink: "blackhole://"}
	if _, err := c.CreateChangefeed(ctx, term, req); err != nil {
		t.Fatal(err)
	}
	if got := slots(); got != "1 1" {
		t.Fatalf("after the create: %s slots and publications, want 1 1", got)
	}

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	err := c.RemoveChangefeed(ctx, term, "orders")
	var pending *CleanupPendingError
	if !errors.As(err, &pending) || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
		t.Fatalf("remove while PostgreSQL is down: %v; want a pending cleanup saying why", err)
	}
	st, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Changefeeds["orders"]; ok {
		t.Fatal("the changefeed is still there")
	}
	if cl, ok := st.Cleanups["orders"]; !ok || cl.Record.Source == "" {
		t.Fatalf("etcd holds no cleanup of orders: %+v", st.Cleanups)
	}
	if _, err := c.CreateChangefeed(ctx, term, req); !errors.Is(err, ErrCleanupPending) {
		t.Fatalf("a create of the same name while its slot is to be dropped: %v", err)
	}

	// The term's loop retries while the database is down, and records
	// its attempts.
	lctx, stopLead := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() { defer close(led); c.Lead(lctx, term) }()
	defer func() { stopLead(); <-led }()
	waitFor(t, 30*time.Second, "an attempt recorded", func() bool {
		st, err := store.Load(ctx)
		return err == nil && st.Cleanups["orders"].Record.Attempts > 0 && st.Cleanups["orders"].Record.LastError != ""
	})
	if err := pg.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the cleanup done", func() bool {
		st, err := store.Load(ctx)
		return err == nil && len(st.Cleanups) == 0
	})
	if got := slots(); got != "0 0" {
		t.Fatalf("after the database came back: %s slots and publications, want 0 0", got)
	}
	if _, err := c.CreateChangefeed(ctx, term, req); err != nil {
		t.Fatalf("a create of the same name after the cleanup: %v", err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// leaderTerm makes node the coordinator as its election would: its
// election key, and the term fenced on it.
func leaderTerm(t *testing.T, cli *clientv3.Client, store *meta.Store, node model.NodeID) election.Term {
	t.Helper()
	key := store.Keys().ElectionPrefix() + string(node)
	put, err := cli.Put(context.Background(), key, string(node))
	if err != nil {
		t.Fatal(err)
	}
	return election.Term{Leader: node, Fence: meta.Fence{Key: key, CreateRevision: put.Header.Revision}}
}

// ordersDB starts a private PostgreSQL holding a table orders, stopped
// when the test ends.
func ordersDB(t *testing.T) *pgserver.Server {
	return pgtest.Start(t, "CREATE TABLE orders (id int8 PRIMARY KEY, v text)")
}

// leadingFixture is a coordinator leading capture-1's term over an etcd
// of its own, with a running view.
type leadingFixture struct {
	c     *Coordinator
	cli   *clientv3.Client
	store *meta.Store
	term  election.Term
	view  *cluster.View
}

func leading(t *testing.T) leadingFixture {
	t.Helper()
	_, cli := etcdtest.Start(t)
	store := meta.NewStore(cli, "test")
	term := leaderTerm(t, cli, store, "capture-1")
	view := cluster.NewView(store, slog.New(slog.DiscardHandler))
	vctx, stopView := context.WithCancel(context.Background())
	t.Cleanup(stopView)
	go func() { _ = view.Run(vctx) }()
	return leadingFixture{c: New(store, view, slog.New(slog.DiscardHandler)), cli: cli, store: store, term: term, view: view}
}
