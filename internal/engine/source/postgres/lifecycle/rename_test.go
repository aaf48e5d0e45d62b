package lifecycle

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A table of a changefeed that names its tables one by one, renamed
// upstream, is followed under its new name by itself, as table rules
// follow one: it used to be held until an operator paused, updated and
// resumed the changefeed. Under a workload that goes on writing it
// under the new name, the changefeed comes to replicate public.orders_v2
// in place of public.orders with no table held, and the sink rebuilt
// equals the upstream's tables, with no change written twice. A second
// changefeed, auto-remedy=false, keeps the table held.
func TestATableRenamedUpstreamIsFollowedUnderItsNewName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE orders (id int8 PRIMARY KEY, n int4);
INSERT INTO orders SELECT g, 0 FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4);
INSERT INTO beside SELECT g, 0 FROM generate_series(1, `+n+`) g;
CREATE TABLE later (id int8 PRIMARY KEY, n int4);
INSERT INTO later SELECT g, 0 FROM generate_series(1, 200) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tc.CreateChangefeed("renamed", dsn+"&tables=public.orders,public.beside&chunk-rows=500&catalog-interval=1s", sink, 2)
	tc.CreateChangefeed("kept", dsn+"&tables=public.orders&auto-remedy=false&catalog-interval=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.CreateChangefeed("stopped", dsn+"&tables=public.later&catalog-interval=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("renamed")
	tc.WaitSnapshot("kept")
	tc.WaitSnapshot("stopped")
	// Renamed while this changefeed's reader is stopped: it meets the
	// rename in the WAL when it starts again, and follows it the same.
	tc.SetState("stopped", model.ChangefeedPaused)
	if _, err := srv.Psql(ctx, "shop", `UPDATE later SET n = 1 WHERE id < 10; ALTER TABLE later RENAME TO later_v2; UPDATE later_v2 SET n = 2 WHERE id > 190`); err != nil {
		t.Fatal(err)
	}
	tc.SetState("stopped", model.ChangefeedNormal)

	var orders atomic.Value
	orders.Store("orders")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- renameWorkload(ctx, dsn, stop, &orders) }()
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE orders RENAME TO orders_v2`); err != nil {
		t.Fatal(err)
	}
	orders.Store("orders_v2")
	tc.Eventually("the changefeed replicates public.orders_v2 in place of public.orders", 60*time.Second, func() bool {
		e := tc.Changefeed("renamed")
		return e != nil && e.Status.State == model.ChangefeedNormal && strings.Contains(e.Info.SourceURI, "public.orders_v2") &&
			!strings.Contains(e.Info.SourceURI, "public.orders%2C") && !strings.HasSuffix(e.Info.SourceURI, "public.orders") && len(e.Status.Tables) == 0
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.orders_v2")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("renamed")
	rep := tc.VerifyDatabase("renamed", up, []string{"public.orders_v2", "public.beside"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the rename was followed: %+v", rep)
	}
	tc.Eventually("the stopped changefeed replicates public.later_v2", 60*time.Second, func() bool {
		e := tc.Changefeed("stopped")
		return e != nil && e.Status.State == model.ChangefeedNormal && strings.Contains(e.Info.SourceURI+"&", "tables=public.later_v2&") && len(e.Status.Tables) == 0
	})
	later, err := postgres.NewTableReader(dsn + "&tables=public.later_v2")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("stopped")
	if rep := tc.VerifyDatabase("stopped", later, []string{"public.later_v2"}, time.Now()); !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("the table renamed while its changefeed was paused: %+v", rep)
	}
	kept := tc.Changefeed("kept")
	if len(kept.Status.Tables) != 1 || kept.Status.Tables[0].State != model.TableHeld || kept.Status.Tables[0].RenamedTo != "" ||
		!strings.Contains(kept.Status.Tables[0].Reason, "--remove-table public.orders --add-table public.orders_v2") {
		t.Fatalf("the changefeed with auto-remedy=false: %+v", kept.Status.Tables)
	}
	t.Logf("%+v", rep.TableReports)
}

// renameWorkload updates, deletes and inserts rows of the orders table,
// under the name it has (a write under the old name after the rename
// is done again under the new one), and of beside, until stopped.
func renameWorkload(ctx context.Context, dsn string, stop chan struct{}, orders *atomic.Value) error {
	return nWorkload(ctx, dsn, stop, 13, func(rng *rand.Rand) string {
		if rng.Intn(2) == 0 {
			return orders.Load().(string)
		}
		return "beside"
	})
}

// A table renamed upstream whose old name is a table again by the time
// the coordinator would follow it (ALTER TABLE orders RENAME TO
// orders_v2, then CREATE TABLE orders (LIKE orders_v2): a swap in two
// statements, the new table without a primary key) is not followed:
// which of the two to replicate is the operator's choice. The check
// used to ask whether the old name could be taken by a changefeed, so a
// new table without a key under it looked like no table, and the
// changefeed followed the archived one.
func TestARenamedTableWhoseOldNameIsATableAgainIsNotFollowed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE orders (id int8 PRIMARY KEY, n int4);
INSERT INTO orders SELECT g, 0 FROM generate_series(1, 500) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4);
INSERT INTO beside SELECT g, 0 FROM generate_series(1, 500) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	// Rounds an hour apart: the remedy is looked at by the next
	// coordinator's first round, once the old name is a table again.
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: time.Hour})
	tc.StartCaptures(2)
	tc.CreateChangefeed("swapped", dsn+"&tables=public.orders,public.beside&catalog-interval=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("swapped")
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE orders RENAME TO orders_v2; UPDATE orders_v2 SET n = 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	var held model.TableIssue
	tc.Eventually("orders held", 30*time.Second, func() bool {
		e := tc.Changefeed("swapped")
		if len(e.Status.Tables) == 1 {
			held = e.Status.Tables[0]
		}
		return held.At != 0
	})
	if held.RenamedTo != "public.orders_v2" {
		// The reader could not confirm the new name then (a loaded
		// machine): held for the operator, the coordinator's check is
		// not reached. Safe, but not what this test is about.
		t.Skipf("orders held without its new name: %+v", held)
	}
	at := held.At
	// Its partition has written everything before the rename: the next
	// coordinator's first round would follow it.
	tc.Eventually("orders' partition to write everything before the rename", 30*time.Second, func() bool {
		st := tc.State()
		for pid, r := range st.Partitions["swapped"] {
			if r.Route.Span.Table == "public.orders" && st.Progress["swapped"][pid].Progress.Checkpoint < at-1 {
				return false
			}
		}
		return true
	})
	if _, err := srv.Psql(ctx, "shop", `CREATE TABLE orders (LIKE orders_v2)`); err != nil {
		t.Fatal(err)
	}
	// Another coordinator, the reader left running (it would look at the
	// old name again when it starts).
	tc.NotCoordinator(tc.WaitLeader().Node)
	tc.Eventually("the coordinator to leave the remedy", 30*time.Second, func() bool {
		return tc.Tail.Warned("remedy is not applied: public.orders is a table again under its old name")
	})
	e := tc.Changefeed("swapped")
	if !strings.Contains(e.Info.SourceURI, "public.orders%2Cpublic.beside") || e.Status.State != model.ChangefeedNormal ||
		len(e.Status.Tables) != 1 || e.Status.Tables[0].Table != "public.orders" {
		t.Fatalf("the changefeed after its table's old name was taken again: %s, %s, %+v", e.Info.SourceURI, e.Status.State, e.Status.Tables)
	}
}
