package cli

import (
	"slices"
	"strings"
	"testing"
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
