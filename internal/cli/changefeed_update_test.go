package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/api"
)

// The tables an update asks for are named as the changefeed names them:
// a name without a schema in public, quoted names as SQL quotes them,
// commas inside quotes kept; an unquoted name with capitals is refused
// before anything is asked of the server.
func TestNextTablesNameTablesAsTheChangefeedDoes(t *testing.T) {
	current := []string{"public.orders", `public."Items"`}
	next, err := nextTables(current, nil, []string{`"Sales Dept"."a,b",invoices`}, []string{`"public"."Items"`}, "public")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"public.orders", `"Sales Dept"."a,b"`, "public.invoices"}; !slices.Equal(next, want) {
		t.Fatalf("next %q, want %q", next, want)
	}
	if _, err := nextTables(current, nil, []string{"public.Invoices"}, nil, "public"); err == nil || !strings.Contains(err.Error(), `--add-table: table "public.Invoices": Invoices is not a lowercase name`) {
		t.Fatalf("an unquoted capital: %v", err)
	}
	if _, err := nextTables(current, nil, nil, []string{`public."items"`}, "public"); err == nil || !strings.Contains(err.Error(), "does not replicate it") {
		t.Fatalf("removing a table the changefeed does not replicate: %v", err)
	}
	rules, err := nextTables(current, []string{`public.*,!audit`}, nil, nil, "public")
	if err != nil || !slices.Equal(rules, []string{"public.*", "!audit"}) {
		t.Fatalf("rules %q %v", rules, err)
	}
}

// A re-snapshot tells the operator which tables are copied under a
// primary key other than the one their partitions were cut on, and that
// ranges cut anew are not the same key ranges.
func TestAResnapshotNamesTablesCopiedUnderAChangedKey(t *testing.T) {
	u := &api.ChangefeedUpdateResponse{Changefeed: "my", Resnapshot: true, DryRun: true, Added: []string{"shop.keyed", "shop.retyped", "shop.orders"},
		AddedPartitions:   []api.Partition{{Table: "shop.keyed"}, {Table: "shop.keyed"}, {Table: "shop.retyped"}, {Table: "shop.retyped"}, {Table: "shop.retyped"}, {Table: "shop.orders"}},
		RemovedPartitions: []string{"p1", "p2", "p3", "p4", "p5"},
		Rekeyed:           []api.RekeyedTable{{Table: "shop.keyed", From: "(x)", To: "(y)"}, {Table: "shop.retyped", From: "(x)", To: "(s)", Recut: true}}}
	var out strings.Builder
	if err := render(&out, "", false, u, func(tw tableWriter) { resnapshotText(tw, u) }); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"shop.keyed    2 partitions copied again, under its primary key as it is now, (y) (its partitions were cut on (x))\n",
		"shop.retyped  3 partitions copied again, under its primary key as it is now, (s) (its partitions were cut on (x)); its key ranges cut anew",
		"shop.orders   1 partition copied again\n",
		"Partitions replaced: 5 by 6 (new ids; the same key ranges but for the 1 table cut anew)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the re-snapshot's text lacks %q:\n%s", want, out.String())
		}
	}
	u.Rekeyed = []api.RekeyedTable{{Table: "shop.orders", From: "(id)", Recut: true}}
	out.Reset()
	if err := render(&out, "", false, u, func(tw tableWriter) { resnapshotText(tw, u) }); err != nil ||
		!strings.Contains(out.String(), "shop.orders   1 partition copied again, now without a primary key (its partitions were cut on (id)); its key ranges cut anew") {
		t.Fatalf("a key dropped: %v\n%s", err, out.String())
	}
	u.Rekeyed = nil
	out.Reset()
	if err := render(&out, "", false, u, func(tw tableWriter) { resnapshotText(tw, u) }); err != nil || !strings.Contains(out.String(), "Partitions replaced: 5 (the same key ranges, new ids)") {
		t.Fatalf("without a changed key: %v\n%s", err, out.String())
	}
}

// An update's text names what the changefeed's publication loses besides
// the removed tables (a table put there by hand), dry run or not; a
// removed table is named once.
func TestAnUpdateNamesWhatThePublicationLosesBesidesTheRemovedTables(t *testing.T) {
	u := &api.ChangefeedUpdateResponse{Changefeed: "my", DryRun: true, Tables: []string{"public.a"}, Removed: []string{"public.b"},
		Unpublished: []string{"public.b", "public.by_hand"}}
	var out strings.Builder
	if err := render(&out, "", false, u, func(tw tableWriter) { updateText(tw, u) }); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "- public.by_hand  leaves the changefeed's publication: not one of its tables (added there by hand, or renamed away from a table copied again)\n") ||
		strings.Count(text, "public.b ") != 1 {
		t.Fatalf("the update's text:\n%s", text)
	}
}
