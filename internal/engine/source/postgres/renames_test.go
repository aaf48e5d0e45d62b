package postgres

import (
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// names are a definition's column names, in order.
func names(def *source.TableDef) string {
	var out []string
	for _, c := range def.Columns {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

// A column renamed is written as a rename, not as a drop and an add:
// downstream, every row that existed before keeps its value under the
// new name (it read NULL there, while upstream kept it). Renames in a
// chain or a swap are written in an order that runs; a drop, a rename to
// the dropped name and an add in one transaction come out as such. Each
// change is read while the catalog still shows it, and once after the
// catalog has moved on (the column renamed again and its name given to
// a new one).
func TestARenamedColumnIsWrittenAsARename(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, a text, b text, c text)`)
	st, _, _ := open(t, dsn+"&tables=t")
	q := `"public"."t"`
	step := func(sql, wantStmt, wantCols string) {
		t.Helper()
		psql(t, srv, dsn, sql)
		tx := txns(t, st, 1)[0]
		if len(tx.Events) != 2 || tx.Events[0].Kind != source.KindDDL || tx.Events[1].Kind != source.KindDML {
			t.Fatalf("after %s: %+v", sql, tx.Events)
		}
		if ddl := tx.Events[0]; ddl.Statement != wantStmt || names(ddl.Def) != wantCols {
			t.Fatalf("after %s:\n statement %s\n columns %s\nwant\n statement %s\n columns %s", sql, ddl.Statement, names(ddl.Def), wantStmt, wantCols)
		}
	}
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a1', 'b1', 'c1')`)
	txns(t, st, 1)
	step(`ALTER TABLE t RENAME COLUMN c TO c2; INSERT INTO t VALUES (2, 'a2', 'b2', 'c2')`,
		`ALTER TABLE `+q+` RENAME COLUMN "c" TO "c2"`, "id,a,b,c2")
	step(`BEGIN; ALTER TABLE t RENAME COLUMN a TO x; ALTER TABLE t RENAME COLUMN b TO a; ALTER TABLE t RENAME COLUMN x TO b; INSERT INTO t VALUES (3, 'b3', 'a3', 'c3'); COMMIT`,
		`ALTER TABLE `+q+` RENAME COLUMN "a" TO "a_cdcctl_renaming"; ALTER TABLE `+q+` RENAME COLUMN "b" TO "a"; ALTER TABLE `+q+` RENAME COLUMN "a_cdcctl_renaming" TO "b"`, "id,b,a,c2")
	step(`BEGIN; ALTER TABLE t DROP COLUMN b; ALTER TABLE t RENAME COLUMN a TO b; ALTER TABLE t ADD COLUMN d int4 DEFAULT 5; INSERT INTO t VALUES (4, 'b4', 'c4', 6); COMMIT`,
		`ALTER TABLE `+q+` DROP COLUMN "b"; ALTER TABLE `+q+` RENAME COLUMN "a" TO "b"; ALTER TABLE `+q+` ADD COLUMN "d" int4 DEFAULT '5'`, "id,b,c2,d")

	// Read behind the catalog: c2 becomes c3, then (later in the WAL) c4,
	// and a new column takes the name c3.
	psql(t, srv, dsn, `ALTER TABLE t RENAME COLUMN c2 TO c3; INSERT INTO t VALUES (5, 'b5', 'c5', 7)`)
	psql(t, srv, dsn, `ALTER TABLE t RENAME COLUMN c3 TO c4; ALTER TABLE t ADD COLUMN c3 text; INSERT INTO t VALUES (6, 'b6', 'c6', 8, 'n6')`)
	tx := txns(t, st, 2)
	for i, want := range []struct{ stmt, cols string }{
		{`ALTER TABLE ` + q + ` RENAME COLUMN "c2" TO "c3"`, "id,b,c3,d"},
		{`ALTER TABLE ` + q + ` RENAME COLUMN "c3" TO "c4"; ALTER TABLE ` + q + ` ADD COLUMN "c3" text`, "id,b,c4,d,c3"},
	} {
		ddl := tx[i].Events[0]
		if ddl.Kind != source.KindDDL || ddl.Statement != want.stmt || names(ddl.Def) != want.cols {
			t.Fatalf("read behind the catalog, change %d: %q (columns %s), want %q (columns %s)", i+1, ddl.Statement, names(ddl.Def), want.stmt, want.cols)
		}
	}
	if holds := st.TakeHolds(); len(holds) != 0 {
		t.Fatalf("held: %+v", holds)
	}
	if got := st.Tables()["public.t"].Nums; len(got) != 5 || got[2] != 4 || got[4] != 6 {
		t.Fatalf("the columns' numbers kept: %v", got)
	}
}

// A change that cannot be told apart once the catalog has moved on is
// not guessed: here column b was dropped, then (later in the WAL) a new b
// added, and the stream's b may be either. A table with a key takes the
// columns by their names and is copied again (it used to be held until an
// operator copied it); one without a key is held, saying how to copy it.
func TestAColumnChangeThatCannotBeToldApartCopiesTheTableAgain(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, a text, b text); CREATE TABLE u (id int4 PRIMARY KEY);
		CREATE TABLE k (id int4, a text, b text); ALTER TABLE k REPLICA IDENTITY FULL`)
	st, _, _ := open(t, dsn+"&tables=t,u,k")
	psql(t, srv, dsn, `ALTER TABLE t DROP COLUMN a; INSERT INTO t VALUES (1, 'b1'); ALTER TABLE k DROP COLUMN a; INSERT INTO k VALUES (1, 'b1')`)
	psql(t, srv, dsn, `ALTER TABLE t DROP COLUMN b; ALTER TABLE t ADD COLUMN b text; INSERT INTO t VALUES (2, 'b2');
		ALTER TABLE k DROP COLUMN b; ALTER TABLE k ADD COLUMN b text; INSERT INTO k VALUES (2, 'b2')`)
	psql(t, srv, dsn, `INSERT INTO u VALUES (1)`)
	var again []copyAgain
	var ddls []string
	for seen := false; !seen; {
		tx := txns(t, st, 1)[0]
		again = append(again, tx.Again...)
		for _, e := range tx.Events {
			if e.Table == "public.k" {
				t.Fatalf("a change of the keyless table written: %+v", e)
			}
			if e.Kind == source.KindDDL {
				ddls = append(ddls, e.Statement)
			}
			seen = seen || e.Table == "public.u"
		}
	}
	if len(again) != 1 || again[0].Table != "public.t" || again[0].Why != againUnclear {
		t.Fatalf("copied again: %+v", again)
	}
	if want := `ALTER TABLE "public"."t" DROP COLUMN "a"`; len(ddls) != 1 || ddls[0] != want {
		t.Fatalf("schema changes %q, want %q", ddls, want)
	}
	holds := st.TakeHolds()
	if len(holds) != 1 || holds[0].Table != "public.k" || !strings.Contains(holds[0].Reason, "renamed, or dropped and others added") || !strings.Contains(holds[0].Reason, "--copy-table public.k") {
		t.Fatalf("holds %+v", holds)
	}
}

// A column of a type of the database's own (an enum here) that was
// dropped with its type before the reader met it is named as the stream
// names it: looked up in the catalog, where the type is gone, it held
// the table ("its new columns cannot be read").
func TestAColumnOfATypeDroppedSinceIsNamedAsTheStreamNamesIt(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text); CREATE TYPE mood AS ENUM ('sad', 'ok')`)
	st, _, _ := open(t, dsn+"&tables=t")
	psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN m mood; INSERT INTO t VALUES (1, 'a', 'ok')`)
	psql(t, srv, dsn, `ALTER TABLE t DROP COLUMN m; DROP TYPE mood; INSERT INTO t VALUES (2, 'b')`)
	tx := txns(t, st, 2)
	if holds := st.TakeHolds(); len(holds) != 0 {
		t.Fatalf("held: %+v", holds)
	}
	want := []string{`ALTER TABLE "public"."t" ADD COLUMN "m" mood`, `ALTER TABLE "public"."t" DROP COLUMN "m"`}
	for i, tx := range tx {
		if ddl := tx.Events[0]; ddl.Kind != source.KindDDL || ddl.Statement != want[i] {
			t.Fatalf("change %d: %+v, want %q", i+1, ddl, want[i])
		}
	}
	if row := tx[0].Events[1]; row.Kind != source.KindDML || row.New[2].Text != "ok" {
		t.Fatalf("the row with the enum: %+v", row)
	}
}

// Column changes read behind the catalog are read as they were, not as
// the catalog's later state would have them: a column dropped in a
// transaction, then (each in its own transaction, later in the WAL)
// another dropped, a third renamed to its name and that name added
// again, is the drop alone (it was taken for a drop, a rename and an
// add). A TRUNCATE and a rename in one transaction is a rename. A key
// column of a table replicated by its whole rows renamed twice is the
// same key (it was taken for a key dropped, and the table held).
func TestColumnChangesReadBehindTheCatalogAreReadAsTheyWere(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t1 (id int4 PRIMARY KEY, a text, b text, c text);
		CREATE TABLE t2 (id int4 PRIMARY KEY, a text);
		CREATE TABLE t3 (id int4 PRIMARY KEY, v text); ALTER TABLE t3 REPLICA IDENTITY FULL`)
	st, _, _ := open(t, dsn+"&tables=t1,t2,t3")
	psql(t, srv, dsn, `ALTER TABLE t1 DROP COLUMN c; INSERT INTO t1 VALUES (1, 'a1', 'b1')`)
	psql(t, srv, dsn, `ALTER TABLE t1 DROP COLUMN a`)
	psql(t, srv, dsn, `ALTER TABLE t1 RENAME COLUMN b TO a`)
	psql(t, srv, dsn, `ALTER TABLE t1 ADD COLUMN b text`)
	psql(t, srv, dsn, `BEGIN; TRUNCATE t2; ALTER TABLE t2 RENAME COLUMN a TO z; INSERT INTO t2 VALUES (1, 'z1'); COMMIT`)
	psql(t, srv, dsn, `ALTER TABLE t3 RENAME COLUMN id TO id2; INSERT INTO t3 VALUES (1, 'v1')`)
	psql(t, srv, dsn, `ALTER TABLE t3 RENAME COLUMN id2 TO id3`)
	tx := txns(t, st, 3)
	want := []string{
		`ALTER TABLE "public"."t1" DROP COLUMN "c"`,
		`TRUNCATE TABLE "public"."t2"; ALTER TABLE "public"."t2" RENAME COLUMN "a" TO "z"`,
		`ALTER TABLE "public"."t3" RENAME COLUMN "id" TO "id2"`,
	}
	for i, tx := range tx {
		var got []string
		for _, e := range tx.Events {
			if e.Kind == source.KindDDL {
				got = append(got, e.Statement)
			}
		}
		if strings.Join(got, "; ") != want[i] {
			t.Errorf("transaction %d: %q, want %q", i+1, got, want[i])
		}
	}
	if holds := st.TakeHolds(); len(holds) != 0 {
		t.Fatalf("held: %+v", holds)
	}
	if key := tx[2].Events[len(tx[2].Events)-1].Def.KeyNames(); len(key) != 1 || key[0] != "id2" {
		t.Fatalf("t3's key after the rename: %v", key)
	}
}
