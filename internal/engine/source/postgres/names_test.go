package postgres

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Names with capitals, spaces, commas and quotes are replicated as they
// are: the changefeed names the table as SQL would quote it, its events
// carry the upstream's schema, table and column names, and rules match
// them. A name that cannot be a storage sink's directory (a slash) is
// refused, saying why.
func TestQuotedMixedCaseNamesAreReplicated(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE SCHEMA "Sales Dept";
		CREATE TABLE "Sales Dept"."Orders" ("Id" int4 PRIMARY KEY, "Amount" numeric, "a,b ""q""" text);
		CREATE TABLE public."x/y" (id int4 PRIMARY KEY);
		CREATE TABLE public.plain (id int4 PRIMARY KEY)`)
	const orders = `"Sales Dept"."Orders"`
	preview, err := Preview(context.Background(), dsn+"&tables="+url.QueryEscape(`"Sales Dept".*,public.*`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{orders, "public.plain"}; !slices.Equal(preview.Tables, want) {
		t.Fatalf("rules matched %v, want %v", preview.Tables, want)
	}
	if len(preview.Refused) != 1 || !strings.Contains(preview.Refused[0], `public."x/y"`) || !strings.Contains(preview.Refused[0], "storage sink's directory") {
		t.Fatalf("refused %q, want public.\"x/y\" with why", preview.Refused)
	}

	st, cfg, up := open(t, dsn+"&tables="+url.QueryEscape(orders+",public.plain"))
	if !slices.Equal(cfg.Tables, []string{orders, "public.plain"}) {
		t.Fatalf("tables %v", cfg.Tables)
	}
	def := up.Defs[orders]
	if def == nil || def.Schema != "Sales Dept" || def.Name != "Orders" || len(def.Columns) != 3 || def.Columns[2].Name != `a,b "q"` {
		t.Fatalf("definition of %s: %+v (definitions %v)", orders, def, up.Defs)
	}
	psql(t, srv, dsn, `INSERT INTO "Sales Dept"."Orders" VALUES (1, 2.5, 'x'), (2, NULL, 'y')`)
	psql(t, srv, dsn, `UPDATE "Sales Dept"."Orders" SET "Amount" = 3 WHERE "Id" = 1`)
	psql(t, srv, dsn, `DELETE FROM "Sales Dept"."Orders" WHERE "Id" = 2`)
	var got []string
	for _, tx := range txns(t, st, 3) {
		for _, e := range tx.Events {
			if e.Table != orders || e.Def == nil || e.Def.Schema != "Sales Dept" || e.Def.Name != "Orders" {
				t.Fatalf("an event of %q, definition %+v", e.Table, e.Def)
			}
			img := e.Image()
			got = append(got, e.Op.String()+" "+img[0].Text+" "+img[1].Text)
		}
	}
	if want := []string{"INSERT 1 2.5", "INSERT 2 ", "UPDATE 1 3", "DELETE 2 "}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// verify reads the table back by its name too.
	_, snap, err := (&TableReader{ConnString: cfg.ConnString}).Snapshot(context.Background(), []string{orders})
	if err != nil {
		t.Fatal(err)
	}
	if row := snap[orders]["1"]; row == nil || row["Amount"] == nil || *row["Amount"] != "3" || len(snap[orders]) != 1 {
		t.Fatalf("upstream rows of %s: %v", orders, snap[orders])
	}
}
