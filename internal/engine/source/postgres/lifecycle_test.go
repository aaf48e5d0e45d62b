package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// pinned starts a database of schema (a and b, or others) and pins a
// changefeed over params (tables=...) under slot: its URI and resume point.
func pinned(t *testing.T, schema, params, slot string) (*pgserver.Server, string, string, source.Position) {
	t.Helper()
	srv, dsn := newDB(t, schema)
	uri, pos, err := Pin(context.Background(), dsn+"&"+params, model.ChangefeedID(slot), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return srv, dsn, uri, pos
}

// issueOf is the reader's issue of table in state, or nil.
func issueOf(r *reading, table, state string) *source.TableIssue {
	for _, i := range r.src.TableIssues() {
		if i.Table == table && i.State == state {
			return &i
		}
	}
	return nil
}

// A table whose rename was followed (b removed, b2 added) and is then
// renamed back to b, a name the changefeed removed, is renamed like any
// other: held where its rows under that name begin. Its rows under the
// removed name were dropped as the removed table's, silently, and the
// checkpoint went past them. Its rows under b from before the first
// rename are still the removed table's (dropped).
func TestATableRenamedBackToANameTheChangefeedRemovedIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn, uri, pos := pinned(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text)`, "tables=a,b", "back")
	psql(t, srv, dsn, `INSERT INTO b VALUES (1, 'under b')`)
	psql(t, srv, dsn, `ALTER TABLE b RENAME TO b2`)
	psql(t, srv, dsn, `INSERT INTO b2 VALUES (2, 'under b2')`)
	// The hold's remedy, from the changefeed's checkpoint before all this.
	ch := retable(t, uri, pos, []string{"a", "b2"}, model.TsFromTime(time.Now().Add(-time.Minute)))
	psql(t, srv, dsn, `ALTER TABLE b2 RENAME TO b`)
	psql(t, srv, dsn, `INSERT INTO b VALUES (3, 'back under b'); INSERT INTO a VALUES (1, 'last')`)

	run := startReading(t, ch.URI, "back", ch.Position)
	run.until(t, "a's last row and b2 held", func() bool {
		return logHas(run.log, "public.a", "last") && issueOf(run, "public.b2", source.TableHeld) != nil
	})
	held := issueOf(run, "public.b2", source.TableHeld)
	run.stop(t)
	if !strings.Contains(held.Reason, "renamed upstream to public.b") {
		t.Fatalf("the hold says: %s", held.Reason)
	}
	// (b2's row from before it joined is its copy's, not the stream's.)
	if logHas(run.log, "public.b2", "under b") || logHas(run.log, "public.b2", "back under b") || logHas(run.log, "public.b", "under b") {
		t.Fatal("a row under the removed name reached the log")
	}
}

// A table renamed (orders to orders_v2: its rename followed) and its
// name given to a new table added back in the same pause: the WAL read
// again from the checkpoint holds the renamed relation's rows under its
// old name, which another relation of the changefeed has now. They were
// taken for a rename of orders_v2 to orders and held it, for good (its
// remedy changed nothing); they are the relation's rows from before its
// rename, which its copy holds. The new orders begins with a TRUNCATE.
func TestATableRenamedAndItsNameAddedBackInOnePauseIsNotHeld(t *testing.T) {
	t.Parallel()
	srv, dsn, uri, pos := pinned(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE orders (id int4 PRIMARY KEY, v text)`, "tables=a,orders", "again")
	at := model.TsFromTime(time.Now())
	psql(t, srv, dsn, `INSERT INTO orders VALUES (1, 'old orders')`)
	psql(t, srv, dsn, `ALTER TABLE orders RENAME TO orders_v2; CREATE TABLE orders (id int4 PRIMARY KEY, v text)`)
	psql(t, srv, dsn, `INSERT INTO orders_v2 VALUES (2, 'v2'); INSERT INTO orders VALUES (3, 'new orders')`)
	renamed := retable(t, uri, pos, []string{"a", "orders_v2"}, at)
	back := retable(t, renamed.URI, renamed.Position, []string{"a", "orders_v2", "orders"}, at)
	psql(t, srv, dsn, `INSERT INTO orders VALUES (4, 'after'); INSERT INTO orders_v2 VALUES (5, 'v2 after'); INSERT INTO a VALUES (1, 'last')`)
	run := startReading(t, back.URI, "again", back.Position)
	run.until(t, "a's last row", func() bool { return logHas(run.log, "public.a", "last") })
	run.until(t, "the rows after the update", func() bool {
		return logHas(run.log, "public.orders", "after") && logHas(run.log, "public.orders_v2", "v2 after")
	})
	for _, tbl := range []string{"public.orders", "public.orders_v2"} {
		if i := issueOf(run, tbl, source.TableHeld); i != nil {
			t.Fatalf("%s held: %s", tbl, i.Reason)
		}
	}
	run.stop(t)
	if logHas(run.log, "public.orders", "old orders") || logHas(run.log, "public.orders", "v2") {
		t.Fatal("a row of the renamed relation reached the log as the new orders'")
	}
}

// A table removed and added back in one pause (the checkpoint the same
// for both updates): the first update wrote the table's DROP (or RENAME)
// to the sink, stamped when it was written, and the TRUNCATE the table
// comes back with went at the first transaction after the checkpoint,
// older: a storage sink's newest schema of the table said it was dropped
// while its rows went on. The TRUNCATE now comes after the return, its
// rows from before it in the copy.
func TestATableAddedBackInThePauseThatRemovedItComesBackAfterItsRemoval(t *testing.T) {
	t.Parallel()
	srv, dsn, uri, pos := pinned(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text)`, "tables=a,b", "readd")
	at := model.TsFromTime(time.Now())
	psql(t, srv, dsn, `INSERT INTO b VALUES (1, 'before the removal')`)
	removed := retable(t, uri, pos, []string{"a"}, at)
	ended := model.TsFromTime(time.Now()) // where the update writes the sink's DROP, at the latest
	back := retable(t, removed.URI, removed.Position, []string{"a", "b"}, at)
	psql(t, srv, dsn, `INSERT INTO b VALUES (2, 'after'); INSERT INTO a VALUES (1, 'last')`)
	run := startReading(t, back.URI, "readd", back.Position)
	run.until(t, "a's last row", func() bool { return logHas(run.log, "public.a", "last") })
	run.stop(t)
	var truncate model.Ts
	run.log.mu.Lock()
	for _, e := range run.log.evs {
		if e.Table == "public.b" && e.Kind == source.KindDDL && strings.HasPrefix(e.Statement, source.TruncatePrefix) {
			truncate = e.CommitTs
		}
	}
	run.log.mu.Unlock()
	if truncate <= ended || removed.EndedAt == 0 || truncate <= removed.EndedAt {
		t.Fatalf("the TRUNCATE of the table added back at %s, not after its removal at %s (the database's clock then: %s)", truncate, ended, removed.EndedAt)
	}
	if !logHas(run.log, "public.b", "after") {
		t.Fatal("the row after the table came back is missing")
	}
}

// A table added from a checkpoint before one of its ALTERs, which a
// publication of all tables sent all along: its copy, made after the
// update, holds its rows, and its definition is the catalog's then.
// Read from the checkpoint, its older rows and schema met that
// definition: the column added since looked dropped and added again (a
// schema change the sink got twice), its older values unknown. Nothing
// of it before it joined is read now.
func TestATableAddedIsReadFromWhenItJoined(t *testing.T) {
	t.Parallel()
	srv, dsn, uri, pos := pinned(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE PUBLICATION everything FOR ALL TABLES`, "tables=a&publication=everything&slot=joined", "joined")
	t.Cleanup(func() { _ = RemoveURI(context.Background(), uri) })
	at := model.TsFromTime(time.Now())
	psql(t, srv, dsn, `INSERT INTO b VALUES (1, 'before its ALTER')`)
	psql(t, srv, dsn, `ALTER TABLE b ADD COLUMN n int4 DEFAULT 7`)
	psql(t, srv, dsn, `INSERT INTO b VALUES (2, 'before it joined', 8)`)
	ch := retable(t, uri, pos, []string{"a", "b"}, at)
	psql(t, srv, dsn, `INSERT INTO b VALUES (3, 'after', 9); INSERT INTO a VALUES (1, 'last')`)
	run := startReading(t, ch.URI, "joined", ch.Position)
	run.until(t, "a's last row and b's", func() bool { return logHas(run.log, "public.a", "last") && logHas(run.log, "public.b", "after") })
	if i := issueOf(run, "public.b", source.TableHeld); i != nil {
		t.Fatalf("b held: %s", i.Reason)
	}
	run.stop(t)
	run.log.mu.Lock()
	defer run.log.mu.Unlock()
	for _, e := range run.log.evs {
		if e.Table != "public.b" {
			continue
		}
		if e.Kind == source.KindDDL {
			t.Errorf("a schema change of b from before it joined: %s", e.Statement)
		}
		if e.Kind == source.KindDML && e.New[1].Text != "after" {
			t.Errorf("a row of b from before it joined: %s", e.New[1].Text)
		}
	}
}
