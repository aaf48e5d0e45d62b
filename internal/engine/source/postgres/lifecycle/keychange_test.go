package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A table's primary key changes under a running changefeed, as
// production schemas do: an int4 key widened to int8 (and a key above
// int4's range written after), a key added to a table replicated by its
// whole rows (REPLICA IDENTITY FULL), and a key moved to other columns.
// Rows are written, updated and deleted before and after each change;
// the sink rebuilt equals the tables, each row once: the rows written
// under the old key are the same rows under the new one, not stale
// copies beside them, and a key of several columns is in its own order.
func TestATablesPrimaryKeyChangesUnderTheChangefeed(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "k")
	ctx := context.Background()
	if _, err := srv.Psql(ctx, "k", `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		INSERT INTO a SELECT g, 'x' FROM generate_series(1, 1000) g;
		CREATE TABLE b (x int4, y int4, v text); ALTER TABLE b REPLICA IDENTITY FULL;
		INSERT INTO b SELECT g, g, 'y' FROM generate_series(1, 100) g;
		CREATE TABLE c (x int4, y int4, v text, PRIMARY KEY (x));
		INSERT INTO c SELECT g, 101 - g, 'z' FROM generate_series(1, 100) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("k")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("pg", dsn+"&tables=a,b,c", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	if _, err := srv.Psql(ctx, "k", `UPDATE a SET v = 'before' WHERE id % 7 = 0; DELETE FROM c WHERE x = 3; UPDATE b SET v = 'before' WHERE x = 4`); err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("pg")
	if _, err := srv.Psql(ctx, "k", `ALTER TABLE a ALTER COLUMN id TYPE int8;
		INSERT INTO a VALUES (5000000000, 'big'), (1001, 'n'); UPDATE a SET v = 'u' WHERE id < 10; DELETE FROM a WHERE id = 500;
		ALTER TABLE b ADD PRIMARY KEY (x); INSERT INTO b VALUES (1000, 1, 'n'); UPDATE b SET v = 'u' WHERE x < 10; DELETE FROM b WHERE x = 20;
		ALTER TABLE c DROP CONSTRAINT c_pkey, ADD PRIMARY KEY (y, x); INSERT INTO c VALUES (1000, 1, 'n'); UPDATE c SET v = 'u' WHERE x < 10; DELETE FROM c WHERE x = 30`); err != nil {
		t.Fatal(err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=a")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.a", "public.b", "public.c"}, time.Now())
	if !rep.OK || rep.Keys != 1001+100+99 || rep.Duplicates != 0 {
		t.Fatalf("after the keys changed: %+v", rep)
	}
	for _, tr := range rep.TableReports {
		if tr.SinkRows != tr.UpstreamRows {
			t.Fatalf("%s: %d rows in the sink, %d upstream", tr.Table, tr.SinkRows, tr.UpstreamRows)
		}
	}
	// The new key is in its own order, (y, x), not the columns'.
	inserts, err := verify.Inserts(ctx, tc.Changefeed("pg").Info.SinkURI, "public.c")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inserts["1,1000"]; !ok {
		t.Fatalf("the row inserted under the key (y, x) = (1, 1000) is not in the sink under it: %d inserts", len(inserts))
	}
}

// A table whose primary key moves to other columns while the initial
// snapshot copies it cannot be copied on: its partitions' ranges and
// what they copied are in the old key's terms. The copy stops with the
// reason and the fix, which changefeed get shows (CopyWarnings, not an
// error of PostgreSQL's about composite types); the fix — the table
// removed and added back — copies it under the new key, and the sink
// rebuilt equals both tables.
func TestAKeyChangedWhileItsTableCopiesIsCopiedAgainByTheFixItNames(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "k")
	ctx := context.Background()
	if _, err := srv.Psql(ctx, "k", `CREATE TABLE c (x int4, y int4, v text, PRIMARY KEY (x));
		INSERT INTO c SELECT g, 20001 - g, 'z' FROM generate_series(1, 20000) g;
		CREATE TABLE d (id int8 PRIMARY KEY, v text); INSERT INTO d VALUES (1, 'd')`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("k")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	uri := dsn + "&tables=c,d&chunk-rows=100&auto-remedy=false"
	tc.CreateChangefeed("pg", uri, "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	if _, err := srv.Psql(ctx, "k", `ALTER TABLE c DROP CONSTRAINT c_pkey, ADD PRIMARY KEY (y, x); INSERT INTO c VALUES (100000, 1, 'n'); UPDATE c SET v = 'u' WHERE x < 10`); err != nil {
		t.Fatal(err)
	}
	var said []string
	tc.Eventually("changefeed get to say why the copy of c stopped", 30*time.Second, func() bool {
		said = postgres.CopyWarnings(ctx, uri, map[string]registry.CopyingTable{"public.c": {KeyTypes: "int4"}, "public.d": {KeyTypes: "int8"}})
		return len(said) == 1
	})
	if !strings.Contains(said[0], "public.c: its primary key changed (from a key of int4 to (y, x) of int4,int4) while the initial snapshot copied it") ||
		!strings.Contains(said[0], "--copy-table public.c") {
		t.Fatalf("changefeed get says %q", said)
	}
	if strings.HasPrefix(tc.CopySummary("pg"), "done") {
		t.Fatal("the copy of c under its old key was taken as done")
	}

	copyCAgain(t, tc, srv, dsn, 20001)
}

// A key moved to another column of the same type while the table copies
// (int4 x to int4 y): the spans' key types cannot tell, but every copy
// records the columns it goes by. A partition that copied part of its
// range under (x) is refused its next chunk under (y), with the reason
// and the fix (changefeed get says it), instead of copying the rest in
// the old key's terms, which left rows in no partition's copy; the fix
// copies the table again, and the sink rebuilt equals the table.
func TestAKeyMovedToAnotherColumnWhileItsTableCopiesIsCopiedAgain(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "k")
	ctx := context.Background()
	if _, err := srv.Psql(ctx, "k", `CREATE TABLE c (x int4 PRIMARY KEY, y int4 NOT NULL, v text);
		INSERT INTO c SELECT g, 40001 - g, 'z' FROM generate_series(1, 40000) g;
		CREATE TABLE d (id int8 PRIMARY KEY, v text); INSERT INTO d VALUES (1, 'd')`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("k")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	uri := dsn + "&tables=c,d&chunk-rows=50&auto-remedy=false"
	tc.CreateChangefeed("pg", uri, "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	first := tc.PartitionFrom("pg", "public.c", "")
	if first.Span.KeyColumns != "(x)" {
		t.Fatalf("c's spans are cut on the key %q, want (x)", first.Span.KeyColumns)
	}
	if copied := tc.CopyUnderWay("pg", first.ID); copied.Key != "(x)" {
		t.Fatalf("the copy records the key %q, want (x)", copied.Key)
	}
	if _, err := srv.Psql(ctx, "k", `ALTER TABLE c DROP CONSTRAINT c_pkey, ADD PRIMARY KEY (y); INSERT INTO c VALUES (100000, 0, 'n'); UPDATE c SET v = 'u' WHERE x < 10`); err != nil {
		t.Fatal(err)
	}
	var said []string
	tc.Eventually("changefeed get to say why the copy of c stopped", 30*time.Second, func() bool {
		said = postgres.CopyWarnings(ctx, uri, map[string]registry.CopyingTable{"public.c": {KeyTypes: "int4", KeyColumns: "(x)"}})
		return len(said) == 1
	})
	if !strings.Contains(said[0], "public.c: its primary key's columns changed from (x) to (y) (moved, or renamed) while the initial snapshot copied it") ||
		!strings.Contains(said[0], "--copy-table public.c") {
		t.Fatalf("changefeed get says %q", said)
	}
	// The partition that had copied under (x) copies no more under (y)
	// (once the chunks read before the change, and its saved progress,
	// have caught up).
	time.Sleep(2 * time.Second)
	before := tc.State().Progress["pg"][first.ID].Progress.Copy
	time.Sleep(2 * time.Second)
	if after := tc.State().Progress["pg"][first.ID].Progress.Copy; after.Done || after.To != before.To || after.Key != "(x)" {
		t.Fatalf("the copy went on under the moved key: %+v, then %+v", before, after)
	}

	copyCAgain(t, tc, srv, dsn, 40001)
}

// copyCAgain runs the fix a key changed while c copied names — c
// removed, then added back, in one pause — writes to c once it is
// copied, and verifies c and d: keys of them in all.
func copyCAgain(t *testing.T, tc *enginetest.Cluster, srv *pgserver.Server, dsn string, keys int) {
	t.Helper()
	tc.UpdateTablesInOnePause("pg", []string{"public.d"}, []string{"public.d", "public.c"})
	tc.WaitSnapshot("pg")
	if _, err := srv.Psql(context.Background(), "k", `DELETE FROM c WHERE x = 30; UPDATE c SET v = 'after' WHERE y = 1`); err != nil {
		t.Fatal(err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=c")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.c", "public.d"}, time.Now())
	if !rep.OK || rep.Keys != keys {
		t.Fatalf("after the table was copied again: %+v", rep)
	}
}

// The same change under a changefeed with auto-remedy (the default): the
// coordinator finds the table whose copy cannot go on (its key changed
// while it copied) and copies it again under its new key by itself, as
// the copy's error tells an operator to. Before, the table's copy and
// the changefeed's checkpoint stopped until an operator did. Under a
// workload on both tables, the sink rebuilt equals them.
func TestAKeyChangedWhileItsTableCopiesIsCopiedAgainByTheChangefeedItself(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "k")
	ctx := context.Background()
	if _, err := srv.Psql(ctx, "k", `CREATE TABLE c (x int4, y int4, v text, PRIMARY KEY (x));
		INSERT INTO c SELECT g, 20001 - g, 'z' FROM generate_series(1, 20000) g;
		CREATE TABLE d (id int8 PRIMARY KEY, v text); INSERT INTO d SELECT g, 'd' FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("k")
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	tc.CreateChangefeed("pg", dsn+"&tables=c,d&chunk-rows=100", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	if _, err := srv.Psql(ctx, "k", `ALTER TABLE c DROP CONSTRAINT c_pkey, ADD PRIMARY KEY (y, x); INSERT INTO c VALUES (100000, 1, 'n'); UPDATE c SET v = 'u' WHERE x < 10`); err != nil {
		t.Fatal(err)
	}
	stop := updating(ctx, srv, "k", func(i int) string {
		id := 1 + i%1000
		return fmt.Sprintf("UPDATE c SET v = 'w%d' WHERE x = %d; UPDATE d SET v = 'w%d' WHERE id = %d", i, id, i, id)
	})
	tc.Eventually("c copied again by the changefeed itself", 60*time.Second, func() bool {
		return slices.ContainsFunc(tc.Changefeed("pg").Status.Incidents, func(in model.Incident) bool {
			return in.Kind == "resumed" && in.Reason == "by a held table's remedy"
		})
	})
	tc.WaitSnapshot("pg")
	time.Sleep(300 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=c")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.c", "public.d"}, time.Now())
	if !rep.OK || rep.Keys != 20001+1000 {
		t.Fatalf("after c was copied again: %+v", rep)
	}
}
