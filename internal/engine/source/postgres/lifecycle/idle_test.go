package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Columns changed on tables nobody writes to afterwards: PostgreSQL
// describes a table to the reader only before its next row, so a
// lookup table's codes rewritten by ALTER COLUMN … TYPE text USING
// upper(code), and columns added with a DEFAULT (one of an enum type) to
// another, and to a third while a second ALTER held it, reached
// neither the sink's schema nor its rows for as long as the tables stayed
// idle (the sink kept the old codes). The reader's look at the catalog
// marks them, and the stream takes each mark as the description
// PostgreSQL would have sent: the sink rebuilt equals the upstream's
// tables without a row written to either, the rewritten table copied
// again once, the other not at all, and the tables left as they were
// (idle, or written: one keyed with INCLUDE columns, one under REPLICA
// IDENTITY FULL) have no schema change. Then an enum's value renamed
// (ALTER TYPE … RENAME VALUE), which changes the rows that hold it,
// directly, in an array, under a domain or in a composite type, without
// writing them: the tables with such columns are copied again, the
// others are not.
func TestColumnsChangedOnTablesNobodyWritesReachTheSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE busy (id int8, n int4, PRIMARY KEY (id) INCLUDE (n));
INSERT INTO busy SELECT g, 0 FROM generate_series(1, 100) g;
CREATE TABLE whole (id int8 PRIMARY KEY, n int4);
ALTER TABLE whole REPLICA IDENTITY FULL;
INSERT INTO whole SELECT g, 0 FROM generate_series(1, 100) g;
CREATE TABLE lookup (id int8 PRIMARY KEY, code varchar(8));
INSERT INTO lookup SELECT g, 'c' || g FROM generate_series(1, 500) g;
CREATE TABLE added (id int8 PRIMARY KEY, note text);
INSERT INTO added SELECT g, 'a' || g FROM generate_series(1, 500) g;
CREATE TABLE still (id int8 PRIMARY KEY, note varchar(8) NOT NULL);
INSERT INTO still SELECT g, 's' || g FROM generate_series(1, 500) g;
CREATE TABLE locked (id int8 PRIMARY KEY, note text);
INSERT INTO locked SELECT g, 'l' || g FROM generate_series(1, 500) g;
CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE DOMAIN feeling AS mood;
CREATE TYPE visit AS (at int4, how mood);
CREATE TYPE moodrange AS RANGE (subtype = mood);
CREATE TABLE moods (id int8 PRIMARY KEY, m mood);
INSERT INTO moods SELECT g, CASE WHEN g % 2 = 0 THEN 'sad' ELSE 'ok' END::mood FROM generate_series(1, 200) g;
CREATE TABLE moodsets (id int8 PRIMARY KEY, ms mood[]);
INSERT INTO moodsets SELECT g, '{ok,sad}' FROM generate_series(1, 200) g;
CREATE TABLE feelings (id int8 PRIMARY KEY, f feeling);
INSERT INTO feelings SELECT g, 'sad' FROM generate_series(1, 200) g;
CREATE TABLE visits (id int8 PRIMARY KEY, v visit[]);
INSERT INTO visits SELECT g, ARRAY[ROW(g, 'sad')::visit] FROM generate_series(1, 200) g;
CREATE TABLE spans (id int8 PRIMARY KEY, r moodrange);
INSERT INTO spans SELECT g, '[ok,sad]' FROM generate_series(1, 200) g;
CREATE TABLE diary (id int8 PRIMARY KEY, day feelings);
INSERT INTO diary SELECT g, ROW(g, 'sad')::feelings FROM generate_series(1, 200) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	dir := t.TempDir()
	sink := "file://" + dir + "?flush-interval=100ms"
	enums := []string{"public.moods", "public.moodsets", "public.feelings", "public.visits", "public.spans", "public.diary"}
	tables := append([]string{"public.busy", "public.whole", "public.lookup", "public.added", "public.still", "public.locked"}, enums...)
	tc.CreateChangefeed("idle", dsn+"&tables="+strings.Join(tables, ",")+"&catalog-interval=500ms", sink, 2)
	tc.WaitSnapshot("idle")
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE lookup ALTER COLUMN code TYPE text USING upper(code)`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE added ADD COLUMN extra int4 DEFAULT 7, ADD COLUMN feel mood DEFAULT 'sad'`); err != nil {
		t.Fatal(err)
	}
	// A change the catalog shows while a second ALTER of the table holds
	// it for two seconds: the look leaves it until it can lock it, and
	// then marks both.
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE locked ADD COLUMN a1 int4 DEFAULT 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE locked ADD COLUMN a2 int4 DEFAULT 2; SELECT pg_sleep(2)`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", `UPDATE busy SET n = n + 1 WHERE id <= 10; UPDATE whole SET n = n + 1 WHERE id <= 10`); err != nil {
		t.Fatal(err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.lookup")
	if err != nil {
		t.Fatal(err)
	}
	var rep verify.Report
	// equal waits for the sink rebuilt to equal the tables, with no
	// duplicate, after what.
	equal := func(what string, within time.Duration) {
		t.Helper()
		tc.EventuallyEvery("the sink to equal the tables after "+what, within, time.Second, func() bool {
			rep = tc.VerifyDatabase("idle", up, tables, time.Now())
			return rep.OK
		})
		if rep.Duplicates != 0 {
			t.Fatalf("after %s: %+v", what, rep)
		}
	}
	// enumCopies checks that each table holding the enum was copied n
	// times.
	enumCopies := func(n int) {
		t.Helper()
		want := map[string]int{}
		for _, table := range enums {
			want[table] = n
		}
		copiedTimesOf(t, sink, want, 200)
	}
	equal("the idle tables' columns changed", 90*time.Second)
	copiedTimesOf(t, sink, map[string]int{"public.lookup": 2, "public.added": 1, "public.still": 1}, 500)
	// The changed tables have a schema file for each version in the
	// sink; the tables left as they were, their first only, also after
	// more looks: the tables written (a key with INCLUDE columns,
	// REPLICA IDENTITY FULL) are described as PostgreSQL describes them.
	time.Sleep(2 * time.Second)
	for table, want := range map[string]int{"lookup": 2, "added": 2, "still": 1, "busy": 1, "whole": 1} {
		files, err := filepath.Glob(filepath.Join(dir, "public", table, "meta", "schema_*.json"))
		if err != nil || len(files) != want {
			for _, f := range files {
				b, _ := os.ReadFile(f)
				t.Logf("%s: %s", f, b)
			}
			t.Errorf("public.%s: schema files %v (%v), want %d", table, files, err, want)
		}
	}
	// An enum's value renamed: the tables whose rows may hold it, each
	// in one form (the enum, its array, a domain over it, an array of a
	// composite type with it, a range of it, the row type of a table
	// with it: diary's days are feelings' rows), are copied again once
	// (added's rows hold it as the column's default), the others not.
	if _, err := srv.Psql(ctx, "shop", `ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'`); err != nil {
		t.Fatal(err)
	}
	equal("an enum's value was renamed", 60*time.Second)
	enumCopies(2)
	copiedTimesOf(t, sink, map[string]int{"public.added": 2, "public.lookup": 2, "public.still": 1}, 500)
	// Another value renamed in the transaction that ends the reader's
	// connection (its walsender terminated before the rename commits):
	// the reader runs again, and its first look still knows the labels
	// from before the rename, so it sees it (before, a run's first look
	// only learnt them: the rename was lost).
	if _, err := srv.Psql(ctx, "shop", `ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'; SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication`); err != nil {
		t.Fatal(err)
	}
	equal("an enum's value was renamed as the reader's connection ended", 60*time.Second)
	enumCopies(3)
	copiedTimesOf(t, sink, map[string]int{"public.added": 3, "public.lookup": 2, "public.still": 1}, 500)
	// A value renamed while no reader runs: every capture stopped (the
	// checkpoint past the last copy first, so that the resume point is
	// after its mark), then a capture that never ran this changefeed
	// started. Its source, opened anew, has no look of its own before
	// the rename, and compares its first with the labels the resume
	// point keeps (before, such a source only learnt them there: the
	// rename was lost).
	tc.WaitCheckpoint("idle", model.TsFromTimeMicros(time.Now()))
	tc.StopTogether(tc.IDs()...)
	if _, err := srv.Psql(ctx, "shop", `ALTER TYPE mood RENAME VALUE 'blue' TO 'down'`); err != nil {
		t.Fatal(err)
	}
	tc.Start("capture-3")
	tc.WaitLeader()
	equal("an enum's value was renamed while no reader ran", 60*time.Second)
	enumCopies(4)
	copiedTimesOf(t, sink, map[string]int{"public.added": 4, "public.lookup": 2, "public.still": 1}, 500)
	t.Logf("%+v", rep.TableReports)
}
