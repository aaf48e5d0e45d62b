package lifecycle

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A column dropped and added again under its name, as its table's last
// column, leaves the relation's columns as pgoutput describes them the
// same (the same names in the same order; with the same type, the same
// message): only the catalog's attribute numbers tell that every older
// row lost its value in it (NULL now, or the new DEFAULT). Before, the
// reader took the message for the table it knew, and every row left
// alone since kept its old value in the sink. Here, under a workload,
// one table's column is dropped and added again with its type, another's
// with another type and a DEFAULT, and the reader's capture is drained at
// once. The sink rebuilt equals the upstream's tables, with no change
// written twice; both were copied again once, a table beside them not.
func TestAColumnDroppedAndAddedAgainUnderItsNameIsCopiedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE same (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO same SELECT g, 0, g FROM generate_series(1, `+n+`) g;
CREATE TABLE other (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO other SELECT g, 0, g FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO beside SELECT g, 0, g FROM generate_series(1, `+n+`) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tables := []string{"public.same", "public.other", "public.beside"}
	tc.CreateChangefeed("recreated", dsn+"&tables="+strings.Join(tables, ",")+"&chunk-rows=100&catalog-interval=1s", sink, 4)
	tc.WaitSnapshot("recreated")

	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "same", "other", "beside") }()
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `
ALTER TABLE same DROP COLUMN c; ALTER TABLE same ADD COLUMN c int4;
ALTER TABLE other DROP COLUMN c; ALTER TABLE other ADD COLUMN c int8 DEFAULT 7;`); err != nil {
		t.Fatal(err)
	}
	// The reader's capture drained at once: the reader starts again
	// elsewhere from the checkpoint, before or after the changes.
	tc.DrainReader("recreated")
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.same")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("recreated")
	rep := tc.VerifyDatabase("recreated", up, tables, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the columns were dropped and added again, and a drain: %+v", rep)
	}
	copiedTimes(t, sink, map[string]int{"public.same": 2, "public.other": 2, "public.beside": 1})
	t.Logf("%+v", rep.TableReports)
}

// A column dropped and added again under its name twice, the reader
// caught up between the two: each time every older row lost its value
// in it, and each time the table is copied again. The second used to be
// missed: after the first, the reader took the table's columns' numbers
// as not known and read them from the catalog at the next relation
// message, which has them as the second change left them, so the
// second change looked like no change; the rows left alone since kept
// the first DEFAULT downstream, the upstream the second.
func TestAColumnDroppedAndAddedAgainTwiceIsCopiedAgainEachTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE twice (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO twice SELECT g, 0, g FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO beside SELECT g, 0, g FROM generate_series(1, `+n+`) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tables := []string{"public.twice", "public.beside"}
	tc.CreateChangefeed("twice", dsn+"&tables="+strings.Join(tables, ",")+"&chunk-rows=500&catalog-interval=1s", sink, 2)
	tc.WaitSnapshot("twice")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "twice", "beside") }()
	for _, def := range []string{"2", "3"} {
		time.Sleep(300 * time.Millisecond)
		if _, err := srv.Psql(ctx, "shop", `ALTER TABLE twice DROP COLUMN c; ALTER TABLE twice ADD COLUMN c int4 DEFAULT `+def); err != nil {
			t.Fatal(err)
		}
		// The workload writes the table after the change: its relation
		// message, and the reader's check at its commit, are passed.
		time.Sleep(500 * time.Millisecond)
		tc.WaitCheckpoint("twice", model.TsFromTimeMicros(time.Now()))
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.twice")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("twice")
	rep := tc.VerifyDatabase("twice", up, tables, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after a column was dropped and added again twice: %+v", rep)
	}
	copiedTimes(t, sink, map[string]int{"public.twice": 3, "public.beside": 1})
}

// A reader stopped while a column is dropped and, later, another added
// under the name of a column dropped meanwhile, meets the first change
// with a catalog that has moved on: which column is which cannot be told
// (a rename, or a drop and an add). The table used to be held until an
// operator copied it again; now its columns are taken by their names and
// it is copied again by itself. Under a workload, the changefeed paused
// across the changes: the sink rebuilt equals the upstream's tables, no
// change written twice, the table copied once more, the one beside it
// not.
func TestColumnsTheReaderCannotTellApartCopyTheTableAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE ab (id int8 PRIMARY KEY, n int4, a text, b text);
INSERT INTO ab SELECT g, 0, 'a' || g, 'b' || g FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4);
INSERT INTO beside SELECT g, 0 FROM generate_series(1, `+n+`) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tables := []string{"public.ab", "public.beside"}
	tc.CreateChangefeed("unclear", dsn+"&tables="+strings.Join(tables, ",")+"&chunk-rows=100&catalog-interval=1s", sink, 3)
	tc.WaitSnapshot("unclear")

	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "ab", "beside") }()
	time.Sleep(300 * time.Millisecond)
	tc.SetState("unclear", model.ChangefeedPaused)
	for _, stmt := range []string{`ALTER TABLE ab DROP COLUMN a`, `UPDATE ab SET n = n + 1 WHERE id < 100`,
		`ALTER TABLE ab DROP COLUMN b`, `ALTER TABLE ab ADD COLUMN b text`, `UPDATE ab SET b = 'new' WHERE id % 10 = 0`} {
		if _, err := srv.Psql(ctx, "shop", stmt); err != nil {
			t.Fatal(err)
		}
	}
	tc.SetState("unclear", model.ChangefeedNormal)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.ab")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("unclear")
	rep := tc.VerifyDatabase("unclear", up, tables, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after columns changed in a way the reader could not tell apart: %+v", rep)
	}
	copiedTimes(t, sink, map[string]int{"public.ab": 2, "public.beside": 1})
	t.Logf("%+v", rep.TableReports)
}

// A table dropped and created again under its name, then copied again
// by an operator (changefeed update --copy-table) instead of removed and
// added back: the copy takes the new table, and so must the stream. The
// publication had lost the dropped relation and did not have the new
// one, so nothing of the new table came after its copy: the sink kept
// the copy's rows for good. Under a workload on both tables, across the
// drop: the sink rebuilt equals the upstream's tables.
func TestATableCreatedAgainAndCopiedAgainIsStreamedToo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE again (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO again SELECT g, 0, g FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO beside SELECT g, 0, g FROM generate_series(1, `+n+`) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tables := []string{"public.again", "public.beside"}
	// The operator's path: without auto-remedy the changefeed would copy
	// the new table itself.
	tc.CreateChangefeed("recreated", dsn+"&tables="+strings.Join(tables, ",")+"&chunk-rows=500&auto-remedy=false&catalog-interval=1s", sink, 2)
	tc.WaitSnapshot("recreated")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "again", "beside") }()
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `
DROP TABLE again;
CREATE TABLE again (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO again SELECT g, 5, -g FROM generate_series(1, `+n+`, 2) g;`); err != nil {
		t.Fatal(err)
	}
	tc.Eventually("the drop reported", 30*time.Second, func() bool {
		for _, ti := range tc.Changefeed("recreated").Status.Tables {
			if ti.Table == "public.again" && ti.State == model.TableDropped {
				return true
			}
		}
		return false
	})
	tc.CopyAgain("recreated", tables, "public.again")
	tc.WaitSnapshot("recreated")
	// The workload writes the new table after its copy.
	time.Sleep(time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.again")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("recreated", up, tables, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the table was created again and copied again: %+v", rep)
	}
	if ts := tc.Changefeed("recreated").Status.Tables; len(ts) != 0 {
		t.Fatalf("the changefeed still reports, after the new table was copied: %+v", ts)
	}
}

// recreateWorkload updates, deletes and inserts rows of tables until
// stopped, writing columns id and n alone (the others are dropped
// meanwhile).
func recreateWorkload(ctx context.Context, dsn string, stop chan struct{}, tables ...string) error {
	return nWorkload(ctx, dsn, stop, 11, func(rng *rand.Rand) string { return tables[rng.Intn(len(tables))] })
}

// nWorkload updates, deletes and inserts rows (id, n) of the table pick
// names each time, until stopped. A table that does not exist under the
// name picked (renamed meanwhile) is written the next time.
func nWorkload(ctx context.Context, dsn string, stop chan struct{}, seed int64, pick func(*rand.Rand) string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(seed))
	next := 100_000
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		table := pick(rng)
		id := 1 + rng.Intn(retypedRows)
		var err error
		switch rng.Intn(6) {
		case 0:
			_, err = conn.Exec(ctx, `INSERT INTO `+table+` (id, n) VALUES ($1, 1)`, next)
			next++
		case 1:
			_, err = conn.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, id)
		default:
			_, err = conn.Exec(ctx, `UPDATE `+table+` SET n = n + 1 WHERE id = $1`, id)
		}
		if err != nil && !strings.Contains(err.Error(), "does not exist") {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}
