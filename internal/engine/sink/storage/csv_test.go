package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A CSV sink is read back by naming its values with the columns of their
// table version's schema file: the key in key order (written in the
// schema file only when it is not the columns' order), NULL apart from
// ” and from a value with commas, quotes and newlines, and an unchanged
// TOAST value keeping the value the row had.
func TestCSVRowsAreRebuiltWithTheirSchemaFile(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir + "?protocol=csv&flush-interval=20ms"
	s := open(t, uri)
	// The key is (id, region); the columns are region, id, ...
	orders := &source.TableDef{Schema: "shop", Name: "orders", Columns: []source.ColumnDef{
		{Name: "region", Type: "text", KeyPos: 2},
		{Name: "id", Type: "int8", KeyPos: 1},
		{Name: "note", Type: "text", Nullable: true},
		{Name: "body", Type: "text", Nullable: true},
	}}
	items := &source.TableDef{Schema: "shop", Name: "items", Columns: []source.ColumnDef{
		{Name: "id", Type: "int8", KeyPos: 1},
		{Name: "name", Type: "text"},
	}}
	odd := "a,b \"quoted\"\nsecond line"
	row := func(region, id string, note, body source.Value) []source.Value {
		return []source.Value{source.Text(region), source.Text(id), note, body}
	}
	dml := func(def *source.TableDef, op source.Op, ts model.Ts, img []source.Value) source.Event {
		e := source.Event{Kind: source.KindDML, Op: op, Table: def.Schema + "." + def.Name, Def: def, TableVersion: 1, CommitTs: ts}
		if op == source.OpDelete {
			e.Old = img
		} else {
			e.New = img
		}
		return e
	}
	evs := []source.Event{
		dml(orders, source.OpInsert, 10, row("eu", "1", source.Text(odd), source.Text("big body"))),
		dml(orders, source.OpInsert, 10, row("us", "1", source.Text(""), source.Null)),
		dml(orders, source.OpInsert, 10, row("eu", "2", source.Null, source.Text("gone"))),
		dml(items, source.OpInsert, 10, []source.Value{source.Text("7"), source.Text("widget")}),
		// The body was not sent: unchanged, stored out of line.
		dml(orders, source.OpUpdate, 20, row("eu", "1", source.Text("noted"), source.Value{Unchanged: true})),
		dml(orders, source.OpDelete, 30, row("eu", "2", source.Null, source.Null)),
	}
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "p1-1", Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background(), "p1-1"); err != nil {
		t.Fatal(err)
	}
	schemas, _ := filepath.Glob(filepath.Join(dir, "shop", "*", "meta", "schema_*.json"))
	if len(schemas) != 2 {
		t.Fatalf("schema files %v", schemas)
	}
	for _, f := range schemas {
		body, _ := os.ReadFile(f)
		if got, want := strings.Contains(string(body), "ColumnKeyPos"), strings.Contains(f, "orders"); got != want {
			t.Fatalf("%s: ColumnKeyPos written %v, want %v (only where the key's order is not the columns'):\n%s", f, got, want, body)
		}
	}

	cfg, err := storage.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	b, err := storage.OpenBucket(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	streams, err := storage.ScanChanges(context.Background(), b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, n := verify.Rebuild(streams, "shop.orders", 30)
	if n != 5 {
		t.Fatalf("%d changes of shop.orders applied, want 5", n)
	}
	str := func(s string) *string { return &s }
	want := verify.Rows{
		"1,eu": {"region": str("eu"), "id": str("1"), "note": str("noted"), "body": str("big body")},
		"1,us": {"region": str("us"), "id": str("1"), "note": str(""), "body": nil},
	}
	if !equalRows(got, want) {
		t.Fatalf("rebuilt from CSV:\n%s\nwant:\n%s", rowsString(got), rowsString(want))
	}
	if items, _ := verify.Rebuild(streams, "shop.items", 30); *items["7"]["name"] != "widget" {
		t.Fatalf("shop.items rebuilt: %s", rowsString(items))
	}

	// Without its schema file a CSV table version cannot be read: the
	// error says which file is missing.
	for _, f := range schemas {
		os.Remove(f)
	}
	if _, err := storage.ScanChanges(context.Background(), b, cfg); err == nil || !strings.Contains(err.Error(), "no schema file") {
		t.Fatalf("CSV without schema files read: %v", err)
	}
}

func equalRows(a, b verify.Rows) bool {
	return rowsString(a) == rowsString(b)
}

func rowsString(r verify.Rows) string {
	var lines []string
	for k, row := range r {
		var cols []string
		for c, v := range row {
			if v == nil {
				cols = append(cols, c+"=NULL")
			} else {
				cols = append(cols, c+"="+*v)
			}
		}
		slices.Sort(cols)
		lines = append(lines, k+": "+strings.Join(cols, " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
