package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// A changefeed's tables change while it is paused: the publication gains
// the added table and loses the removed one (a dry run changes nothing);
// the reader, resuming from before the change, reads the added table's
// changes and drops the removed table's rows still in the WAL instead of
// stopping on them; a removed table comes back, its sink truncated
// first; an operator's own
// publication is never altered.
func TestRetableChangesThePublicationAndTheReaderFollows(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE c (id int4 PRIMARY KEY, v text);
		INSERT INTO c SELECT g, 'before' FROM generate_series(1, 10) g`)
	ctx := context.Background()
	uri, pos, err := Pin(ctx, dsn+"&tables=a,b", "retable", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	published := func() string {
		out, err := srv.Psql(ctx, dbOf(dsn), `SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'cdcctl_retable'`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	// Rows of both tables while the changefeed runs; it pauses without
	// confirming them, so the reader reads them again after the update.
	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1')`)

	at := model.TsFromTime(time.Now())
	dry, err := Retable(ctx, uri, pos, []string{"a", "c"}, at, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Added, []string{"public.c"}) || !slices.Equal(dry.Removed, []string{"public.b"}) || !slices.Equal(dry.Tables, []string{"public.a", "public.c"}) {
		t.Fatalf("dry run: added %v, removed %v, tables %v", dry.Added, dry.Removed, dry.Tables)
	}
	if got := published(); got != "a,b" {
		t.Fatalf("a dry run changed the publication: %s", got)
	}
	ch, err := Retable(ctx, uri, pos, []string{"a", "c"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	// b leaves the publication only once the change is stored (the
	// changefeed update's write): a change that could not be would
	// otherwise have put it back having missed its changes meanwhile.
	if got := published(); got != "a,b,c" || ch.Finish == nil {
		t.Fatalf("before the change is stored, the publication publishes %s, want a,b,c", got)
	}
	if err := ch.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := published(); got != "a,c" {
		t.Fatalf("the publication publishes %s, want a,c", got)
	}
	if !strings.Contains(ch.URI, "tables=public.a%2Cpublic.c") {
		t.Fatalf("the stored URI after the update: %s", Redact(ch.URI))
	}
	psql(t, srv, dsn, `INSERT INTO a VALUES (2, 'a2'); INSERT INTO b VALUES (2, 'b2'); INSERT INTO c VALUES (11, 'c11'); INSERT INTO a VALUES (3, 'last')`)

	run := startReading(t, ch.URI, "retable", ch.Position)
	has := func(table, v string) bool { return logHas(run.log, table, v) }
	run.until(t, "the last row", func() bool { return has("public.a", "last") })
	run.stop(t)
	log := run.log
	if !has("public.c", "c11") || !has("public.a", "a1") || !has("public.a", "a2") {
		t.Fatal("rows of the tables replicated after the update are missing")
	}
	log.mu.Lock()
	for _, e := range log.evs {
		if e.Table == "public.b" {
			t.Errorf("a row of the removed table: %+v", e)
		}
	}
	log.mu.Unlock()

	// The removed table comes back, dropped and created again meanwhile:
	// the reader, reading the WAL again from before, drops the old
	// table's rows and the rows before the return, and begins the table
	// with a TRUNCATE (the sink forgets what it had) before its new rows.
	psql(t, srv, dsn, `DROP TABLE b; CREATE TABLE b (id int4 PRIMARY KEY, w text); INSERT INTO b VALUES (5, 'new b before')`)
	at2 := model.TsFromTime(time.Now())
	back, err := Retable(ctx, ch.URI, ch.Position, []string{"a", "c", "b"}, at2, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Added, []string{"public.b"}) || published() != "a,b,c" {
		t.Fatalf("added back %v, published %s", back.Added, published())
	}
	psql(t, srv, dsn, `INSERT INTO b VALUES (6, 'new b after'); INSERT INTO a VALUES (4, 'end')`)
	again := startReading(t, back.URI, "retable", back.Position)
	again.until(t, "the end row", func() bool { return logHas(again.log, "public.a", "end") })
	again.stop(t)
	var ofB []string
	again.log.mu.Lock()
	for _, e := range again.log.evs {
		if e.Table != "public.b" {
			continue
		}
		if e.CommitTs <= at2 {
			t.Errorf("an event of public.b before it came back: %+v", e)
		}
		if e.Kind == source.KindDDL {
			ofB = append(ofB, e.Statement)
		} else {
			ofB = append(ofB, e.Op.String()+" "+e.New[1].Text)
		}
	}
	again.log.mu.Unlock()
	if want := []string{source.TruncatePrefix + `"public"."b"`, "INSERT new b after"}; !slices.Equal(ofB, want) {
		t.Fatalf("public.b after it came back: %q, want %q", ofB, want)
	}
	if _, err := Retable(ctx, ch.URI, ch.Position, []string{"a", "nosuch"}, at, false); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("adding a table that does not exist: %v", err)
	}

	// A publication the operator named must publish an added table first.
	psql(t, srv, dsn, `CREATE PUBLICATION mine FOR TABLE a`)
	own, _, err := Pin(ctx, dsn+"&tables=a&publication=mine&slot=mine", "mine", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = RemoveURI(context.Background(), own) })
	_, err = Retable(ctx, own, pos, []string{"a", "c"}, at, true)
	if err == nil || !strings.Contains(err.Error(), `ALTER PUBLICATION mine ADD TABLE ONLY "public"."c"`) {
		t.Fatalf("an operator's publication: %v", err)
	}
}

// A changefeed created with snapshot=never copies nothing: a table of it
// is not copied again (an operator's --copy-table, a held table's
// remedy), which would truncate the table in the sink and copy nothing
// back. The refusal says why; the publication is not touched.
func TestATableOfAChangefeedWithoutASnapshotIsNotCopiedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn, uri, pos := pinAB(t, "&snapshot=never", "never")
	for _, apply := range []bool{false, true} {
		_, err := Retable(ctx, uri, pos, []string{"a", "b"}, model.TsFromTime(time.Now()), apply, "public.a")
		if err == nil || !strings.Contains(err.Error(), "table public.a cannot be copied again: the changefeed was created with snapshot=never") {
			t.Fatalf("copy again (apply %v) in a changefeed without a snapshot: %v", apply, err)
		}
	}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'cdcctl_never'`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != "a,b" {
		t.Fatalf("the publication publishes %s, want a,b", got)
	}
}

// A table renamed upstream and followed under its new name ends under
// its old name (the sink's ALTER TABLE ... RENAME TO, at EndedAt) before
// its new name begins (its copy's rows, at JoinedAt): a consumer that
// applies the sink's changes in commit order meets the rename before the
// table it names. Before, the clock for the new name was read first.
func TestARenameEndsTheOldNameBeforeTheNewNameBegins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn, uri, pos := pinAB(t, "", "renamed")
	psql(t, srv, dsn, `ALTER TABLE a RENAME TO a2`)
	ch, err := Retable(ctx, uri, pos, []string{"a2", "b"}, model.TsFromTime(time.Now()), false)
	if err != nil {
		t.Fatal(err)
	}
	var p position
	if err := json.Unmarshal(ch.Position, &p); err != nil {
		t.Fatal(err)
	}
	if ch.Ended["public.a"].RenamedTo != "public.a2" || ch.EndedAt == 0 || p.Tables["public.a2"].JoinedAt <= ch.EndedAt {
		t.Fatalf("the rename ends public.a at %v (%+v), public.a2 joins at %v", ch.EndedAt, ch.Ended, p.Tables["public.a2"].JoinedAt)
	}
}

// A table renamed upstream (not followed), another created under its
// name and copied again in its place: the renamed relation leaves the
// publication, where it stayed and its WAL was decoded for nothing; one
// that is a table of the changefeed still stays.
func TestARenamedTableLeavesThePublicationWhenItsOldNameIsCopiedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn, uri, pos := pinAB(t, "", "away_old")
	psql(t, srv, dsn, `ALTER TABLE a RENAME TO a_old; CREATE TABLE a (id int4 PRIMARY KEY, v text);
		ALTER TABLE b RENAME TO b_old; CREATE TABLE b (id int4 PRIMARY KEY, v text)`)
	// b_old is one of the changefeed's tables after the change: it stays.
	ch, err := Retable(ctx, uri, pos, []string{"a", "b", "b_old"}, model.TsFromTime(time.Now()), true, "public.a", "public.b")
	if err != nil {
		t.Fatal(err)
	}
	if ch.Finish == nil {
		t.Fatal("a_old is not taken out of the publication once the change is stored")
	}
	if err := ch.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'cdcctl_away_old'`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != "a,b,b_old" {
		t.Fatalf("the publication publishes %s, want a,b,b_old", got)
	}
}

// pinAB makes a database of tables a and b and pins a changefeed's slot
// and publication of both (params: more of the source URI's).
func pinAB(t *testing.T, params string, cf model.ChangefeedID) (*pgserver.Server, string, string, source.Position) {
	t.Helper()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text); CREATE TABLE b (id int4 PRIMARY KEY, v text)`)
	uri, pos, err := Pin(context.Background(), dsn+"&tables=a,b"+params, cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return srv, dsn, uri, pos
}

// retable changes a changefeed's tables as a stored changefeed update
// does: Retable applied, then, the change stored, its Finish.
func retable(t *testing.T, uri string, pos source.Position, tables []string, at model.Ts, again ...string) source.Retabled {
	t.Helper()
	ctx := context.Background()
	ch, err := Retable(ctx, uri, pos, tables, at, true, again...)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Finish != nil {
		if err := ch.Finish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return ch
}
