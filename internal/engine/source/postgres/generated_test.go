package postgres

import (
	"context"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A stored generated column is not replicated (pgoutput does not send
// it): the table's definition has no such column, its rows come with no
// schema change, and verify's read of the table leaves it out too.
func TestAGeneratedColumnIsNeitherSentNorMissed(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE lines (id int4 PRIMARY KEY, qty int4, total int4 GENERATED ALWAYS AS (qty * 2) STORED, note text)`)
	st, _, up := open(t, dsn+"&tables=public.lines")
	def := up.Defs["public.lines"]
	if def.Index("total") >= 0 || def.Index("note") < 0 || len(def.Columns) != 3 {
		t.Fatalf("definition %+v: want id, qty, note", def.Columns)
	}
	psql(t, srv, dsn, `INSERT INTO lines (id, qty, note) VALUES (1, 2, 'a')`)
	psql(t, srv, dsn, `UPDATE lines SET qty = 5 WHERE id = 1`)
	for _, x := range txns(t, st, 2) {
		for _, e := range x.Events {
			if e.Kind != source.KindDML {
				t.Fatalf("a %v of %s: %s (the generated column is no schema change)", e.Kind, e.Table, e.Statement)
			}
			if len(e.New) != 3 || e.New[1].Text == "" || e.New[2].Text != "a" {
				t.Fatalf("row %+v", e.New)
			}
		}
	}
	r, err := NewTableReader(dsn + "&tables=public.lines")
	if err != nil {
		t.Fatal(err)
	}
	_, rows, err := r.Snapshot(context.Background(), []string{"public.lines"})
	if err != nil {
		t.Fatal(err)
	}
	row := rows["public.lines"]["1"]
	if _, has := row["total"]; has || row["qty"] == nil || *row["qty"] != "5" {
		t.Fatalf("verify's read of the table: %v", row)
	}
}
