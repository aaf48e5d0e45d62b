package model

import (
	"strings"
	"testing"
)

func TestTableNamesSplitBackExactly(t *testing.T) {
	for _, c := range []struct{ schema, table, name string }{
		{"public", "orders", "public.orders"},
		{"public", "Orders", `public."Orders"`},
		{"My Schema", `a"b.c`, `"My Schema"."a""b.c"`},
		{"", "t0001", "t0001"},
		{"sales", "order_2024$", "sales.order_2024$"},
		{"public", "1st", `public."1st"`},
	} {
		if got := TableName(c.schema, c.table); got != c.name {
			t.Errorf("TableName(%q, %q) = %s, want %s", c.schema, c.table, got, c.name)
		}
		if s, tb := SplitTableName(c.name); s != c.schema || tb != c.table {
			t.Errorf("SplitTableName(%s) = %q, %q", c.name, s, tb)
		}
		if s, tb, err := ParseTableName(c.name); err != nil || s != c.schema || tb != c.table {
			t.Errorf("ParseTableName(%s) = %q, %q, %v", c.name, s, tb, err)
		}
	}
}

func TestTableNamesAnOperatorWrites(t *testing.T) {
	if s, tb, err := ParseTableName(`"public"."orders"`); err != nil || TableName(s, tb) != "public.orders" {
		t.Fatalf("quoted plain names: %q %q %v", s, tb, err)
	}
	for in, mention := range map[string]string{
		"public.Orders":   `write "Orders" for the name as it is, or orders`,
		`public."Orders`:  "each a lowercase name or a double-quoted one",
		`public."a"b`:     "each a lowercase name or a double-quoted one",
		"a.b.c":           "each a lowercase name or a double-quoted one",
		"public.":         "each a lowercase name or a double-quoted one",
		`public.""`:       "each a lowercase name or a double-quoted one",
		"":                "each a lowercase name or a double-quoted one",
		"public.my table": `write "my table"`,
	} {
		if _, _, err := ParseTableName(in); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseTableName(%q) = %v, want an error saying %q", in, err, mention)
		}
	}
	got := SplitTableList(` public.a, "x,y"."b,c" ,,!public."Q" `)
	want := []string{"public.a", `"x,y"."b,c"`, `!public."Q"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("SplitTableList = %q, want %q", got, want)
	}
}

func FuzzTableName(f *testing.F) {
	f.Add("public", "Orders")
	f.Add(`a"b`, "c.d")
	f.Fuzz(func(t *testing.T, schema, table string) {
		if table == "" {
			t.Skip()
		}
		name := TableName(schema, table)
		if s, tb := SplitTableName(name); s != schema || tb != table {
			t.Fatalf("%q %q -> %s -> %q %q", schema, table, name, s, tb)
		}
		if schema != "" {
			if s, tb, err := ParseTableName(name); err != nil || s != schema || tb != table {
				t.Fatalf("ParseTableName(%s) = %q %q %v", name, s, tb, err)
			}
		}
		_, _, _ = ParseTableName(schema) // must not panic
		SplitTableList(schema + "," + table)
	})
}
