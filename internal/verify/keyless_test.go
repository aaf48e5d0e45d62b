package verify

import (
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

func str(s string) *string { return &s }

func keylessChange(ts model.Ts, op, kind, n string, old map[string]*string) codec.Change {
	return codec.Change{Database: "public", Table: "k", Op: op, Data: map[string]*string{"kind": str(kind), "n": str(n)}, Old: old, CommitTs: ts}
}

// A table without a primary key is rebuilt as a multiset: equal rows
// count, an update or delete changes one of them, and a transaction a
// second dispatcher wrote again after a crash is taken once.
func TestAKeylessTableIsRebuiltAsAMultiset(t *testing.T) {
	first := storage.ChangeStream{Dispatcher: "p1.1", Database: "public", Table: "k", Changes: []codec.Change{
		keylessChange(10, "INSERT", "a", "0", nil),
		keylessChange(10, "INSERT", "a", "0", nil),
		keylessChange(10, "INSERT", "b", "0", nil),
		keylessChange(20, "UPDATE", "a", "1", map[string]*string{"n": str("0")}),
	}}
	// The crash replay: the transaction at 20 again, then one more.
	replay := storage.ChangeStream{Dispatcher: "p1.2", Database: "public", Table: "k", Changes: []codec.Change{
		keylessChange(20, "UPDATE", "a", "1", map[string]*string{"n": str("0")}),
		keylessChange(30, "DELETE", "b", "0", nil),
		keylessChange(30, "INSERT", "a", "1", nil),
	}}
	streams := []storage.ChangeStream{first, replay}
	rows, _, dups := rebuild(streams, nil, "public.k", 100)
	a0 := map[string]*string{"kind": str("a"), "n": str("0")}
	a1 := map[string]*string{"kind": str("a"), "n": str("1")}
	want := Rows{model.ImageKey(a0, 1): a0, model.ImageKey(a1, 1): a1, model.ImageKey(a1, 2): a1}
	if len(rows) != len(want) {
		t.Fatalf("rebuilt %d rows %v, want %d", len(rows), keysOf(rows), len(want))
	}
	for k := range want {
		if _, ok := rows[k]; !ok {
			t.Fatalf("row %s missing from %v", k, keysOf(rows))
		}
	}
	if dups != 1 {
		t.Fatalf("%d duplicates counted, want the one replayed update", dups)
	}
	// Up to 20 only: the b row is still there.
	if rows, _, _ := rebuild(streams, nil, "public.k", 20); len(rows) != 3 {
		t.Fatalf("up to 20: %v", keysOf(rows))
	}
	// Compared with an upstream that lost an equal row, the sink has
	// one extra copy.
	rep := &Report{}
	tr, _ := compare("public.k", Rows{model.ImageKey(a0, 1): a0, model.ImageKey(a1, 1): a1}, rows, nil, false, rep)
	if tr.Extra != 1 || tr.Missing != 0 {
		t.Fatalf("against one copy fewer upstream: %+v", tr)
	}
}

func keysOf(r Rows) []string {
	var out []string
	for k := range r {
		out = append(out, k)
	}
	return out
}

// A TRUNCATE empties the rebuilt table at its position: rows before it
// are gone, rows of its own transaction (after it) and later stay.
func TestATruncateEmptiesTheRebuiltTable(t *testing.T) {
	row := func(ts model.Ts, op, id string) codec.Change {
		return codec.Change{Database: "public", Table: "t", Op: op, PkNames: []string{"id"}, Data: map[string]*string{"id": str(id)}, CommitTs: ts}
	}
	streams := []storage.ChangeStream{{Dispatcher: "p1.1", Database: "public", Table: "t", Changes: []codec.Change{
		row(10, "INSERT", "1"), row(10, "INSERT", "2"), row(30, "INSERT", "3"), row(40, "UPDATE", "1"),
	}}}
	// The TRUNCATE at 29, its transaction's rows at 30.
	rows, _, _ := rebuild(streams, []schemaStep{{at: 29, truncate: true}}, "public.t", 100)
	if len(rows) != 2 || rows["3"] == nil || rows["1"] == nil {
		t.Fatalf("after the TRUNCATE: %v", keysOf(rows))
	}
	if rows, _, _ := rebuild(streams, []schemaStep{{at: 29, truncate: true}}, "public.t", 20); len(rows) != 2 || rows["2"] == nil {
		t.Fatalf("before the TRUNCATE: %v", keysOf(rows))
	}
	if rows, _, _ := rebuild(streams, []schemaStep{{at: 29, truncate: true}}, "public.t", 29); len(rows) != 0 {
		t.Fatalf("at the TRUNCATE: %v", keysOf(rows))
	}
}

// A column added with a DEFAULT gives the rows already there its value,
// as PostgreSQL does; rows written after it carry their own.
func TestAnAddedColumnsDefaultFillsOlderRows(t *testing.T) {
	row := func(ts model.Ts, id string, extra *string) codec.Change {
		data := map[string]*string{"id": str(id)}
		if extra != nil {
			data["extra"] = extra
		}
		return codec.Change{Database: "public", Table: "t", Op: "INSERT", PkNames: []string{"id"}, Data: data, CommitTs: ts}
	}
	streams := []storage.ChangeStream{{Dispatcher: "p1.1", Database: "public", Table: "t", Changes: []codec.Change{
		row(10, "1", nil), row(30, "2", str("8")),
	}}}
	steps := stepsOf([]storage.SchemaChange{{Database: "public", Table: "t", At: 20, Query: `ALTER TABLE "public"."t" ADD COLUMN "extra" int4 DEFAULT '7', ADD COLUMN "n" numeric(10,2)`}}, "public.t", nil)
	rows, _, _ := rebuild(streams, steps, "public.t", 100)
	if v := rows["1"]["extra"]; v == nil || *v != "7" {
		t.Fatalf("the older row's added column: %v", v)
	}
	if v := rows["2"]["extra"]; v == nil || *v != "8" {
		t.Fatalf("the newer row's own value: %v", v)
	}
	if _, ok := rows["1"]["n"]; ok {
		t.Fatal("a column added without a DEFAULT was filled")
	}
}

// A column renamed upstream is renamed in the rows already rebuilt, as a
// consumer applying the statement would: PostgreSQL's RENAME COLUMN, and
// MySQL's RENAME COLUMN and CHANGE, quoted either way, several in order.
func TestARenamedColumnIsRenamedInOlderRows(t *testing.T) {
	row := func(ts model.Ts, id string, cols map[string]*string) codec.Change {
		data := map[string]*string{"id": str(id)}
		for c, v := range cols {
			data[c] = v
		}
		return codec.Change{Database: "shop", Table: "t", Op: "INSERT", PkNames: []string{"id"}, Data: data, CommitTs: ts}
	}
	streams := []storage.ChangeStream{{Dispatcher: "p1.1", Database: "shop", Table: "t", Changes: []codec.Change{
		row(10, "1", map[string]*string{"a": str("x"), "b": str("y"), "c": str("z")}),
		row(30, "2", map[string]*string{"a2": str("x2"), "b2": str("y2"), "c": str("z2")}),
		row(50, "3", map[string]*string{"a3": str("x3"), "b2": str("y3"), "c": str("z3")}),
	}}}
	steps := stepsOf([]storage.SchemaChange{
		{Database: "shop", Table: "t", At: 20, Query: "ALTER TABLE t RENAME COLUMN a TO `a2`, CHANGE COLUMN b b2 VARCHAR(10), CHANGE c c INT"},
		{Database: "shop", Table: "t", At: 40, Query: `ALTER TABLE "shop"."t" RENAME COLUMN "a2" TO "a3"`},
	}, "shop.t", nil)
	rows, _, _ := rebuild(streams, steps, "shop.t", 100)
	for id, want := range map[string]string{"1": "a3=x b2=y c=z", "2": "a3=x2 b2=y2 c=z2", "3": "a3=x3 b2=y3 c=z3"} {
		var got []string
		for _, c := range []string{"a3", "b2", "c", "a", "a2", "b"} {
			if v, ok := rows[id][c]; ok {
				got = append(got, c+"="+*v)
			}
		}
		if strings.Join(got, " ") != want {
			t.Errorf("row %s: %s, want %s", id, strings.Join(got, " "), want)
		}
	}
}

// A column added without a DEFAULT is NULL in a keyless table's older
// rows, which the sink wrote without it: an update whose old image has
// NULL there changes one of them, as it does for a consumer that applied
// the ADD COLUMN. It was taken for a row that is not there: the old row
// stayed and the new one was added beside it.
func TestAKeylessRowWrittenBeforeAColumnWasAddedIsUpdated(t *testing.T) {
	grade := func(ts model.Ts, n, g string, old map[string]*string) codec.Change {
		c := keylessChange(ts, "UPDATE", "a", n, old)
		c.Data["grade"] = str(g)
		return c
	}
	s := storage.ChangeStream{Dispatcher: "p1.1", Database: "public", Table: "k", Changes: []codec.Change{
		keylessChange(10, "INSERT", "a", "0", nil),
		keylessChange(10, "INSERT", "a", "1", nil),
		grade(20, "0", "7", map[string]*string{"kind": str("a"), "n": str("0"), "grade": nil}),
	}}
	rows, _, _ := rebuild([]storage.ChangeStream{s}, nil, "public.k", 100)
	graded := map[string]*string{"kind": str("a"), "n": str("0"), "grade": str("7")}
	a1 := map[string]*string{"kind": str("a"), "n": str("1")}
	if _, ok := rows[model.ImageKey(graded, 1)]; len(rows) != 2 || !ok {
		t.Fatalf("rebuilt %v, want the updated row and the other", keysOf(rows))
	}
	if _, ok := rows[model.ImageKey(a1, 1)]; !ok {
		t.Fatalf("rebuilt %v: the row not updated is gone", keysOf(rows))
	}
}
