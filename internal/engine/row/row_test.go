package row

import "testing"

// The statements that end a table under its name read as SQL and are
// told apart from the other schema changes.
func TestStatementsThatEndATable(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"public.orders", "public.orders_v2", "ALTER TABLE public.orders RENAME TO orders_v2"},
		{`public."Orders"`, `public."Orders 2"`, `ALTER TABLE public."Orders" RENAME TO "Orders 2"`},
		{"public.a", "archive.b", "ALTER TABLE public.a SET SCHEMA archive; ALTER TABLE archive.a RENAME TO b"},
	} {
		got := RenameStatement(c.from, c.to)
		if got != c.want || !EndsTable(got) {
			t.Errorf("RenameStatement(%s, %s) = %q (ends a table: %v), want %q", c.from, c.to, got, EndsTable(got), c.want)
		}
	}
	for stmt, ends := range map[string]bool{
		DropPrefix + "public.t":                        true,
		TruncatePrefix + `"public"."t"`:                false,
		`ALTER TABLE "public"."t" ADD COLUMN "c" int8`: false,
		`ALTER TABLE "public"."t" DROP COLUMN "c"`:     false,
	} {
		if EndsTable(stmt) != ends {
			t.Errorf("EndsTable(%q) = %v, want %v", stmt, !ends, ends)
		}
	}
}
