package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// Reading one table's definition opens that table, not every table of
// the server: the snapshot reads it before each chunk, and the reader
// whenever a table's schema is looked up. Joined in one query, the
// catalog's key columns opened every table of every database (1,114
// tables opened on a server with 1,000 tables elsewhere, tens of
// milliseconds a read, more with more tables). The definition read is
// the table's: its columns in order, its key's positions in the key's
// order (not the columns'), each character column's set and the
// table's default.
func TestATablesDefinitionIsReadWithoutOpeningTheServersOtherTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := mysqltest.Start(t, "keys")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE DATABASE elsewhere")
	for i := range 200 {
		exec(fmt.Sprintf("CREATE TABLE elsewhere.t%d (id INT PRIMARY KEY, v VARCHAR(20))", i))
	}
	exec("CREATE TABLE keys.k (a INT, name VARCHAR(20) CHARACTER SET utf8mb4, b BIGINT UNSIGNED, note TEXT, PRIMARY KEY (b, a)) DEFAULT CHARSET latin1")
	opened := func() int {
		t.Helper()
		var name string
		var n int
		if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Opened_tables'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec("FLUSH TABLES")
	before := opened()
	st, err := readTable(ctx, conn, "keys.k")
	if err != nil {
		t.Fatal(err)
	}
	if n := opened() - before; n > 5 {
		t.Errorf("reading keys.k's definition opened %d tables; want only it (the catalog's queries must name it by constants)", n)
	}
	var got string
	for _, c := range st.Def.Columns {
		got += fmt.Sprintf("%s %s key=%d null=%v; ", c.Name, c.Type, c.KeyPos, c.Nullable)
	}
	want := "a int(11) key=2 null=false; name varchar(20) key=0 null=true; b bigint(20) unsigned key=1 null=false; note text key=0 null=true; "
	if got != want {
		t.Errorf("definition:\n got %s\nwant %s", got, want)
	}
	if fmt.Sprint(st.Charsets) != "map[3:latin1]" || st.DefaultCharset != "latin1" {
		t.Errorf("character sets %v, default %q; want map[3:latin1] (note) and latin1", st.Charsets, st.DefaultCharset)
	}
	if _, err := readTable(ctx, conn, "keys.missing"); err == nil {
		t.Error("a missing table's definition was read")
	}
}

// Following table rules that name their databases reads the catalog of
// those databases only: the server's other tables' definitions are not
// read each time the rules are followed. A rule with a wildcard in its
// database still lists every database and matches the same way.
func TestRulesThatNameTheirDatabaseReadOnlyItsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := mysqltest.Start(t, "shop")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the session whose status is read is the rules'
	for _, q := range []string{"CREATE DATABASE elsewhere", "CREATE TABLE shop.a (id INT PRIMARY KEY)", "CREATE TABLE shop.b (id INT PRIMARY KEY)", "CREATE TABLE shop.c (v INT)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE TABLE elsewhere.t%d (id INT PRIMARY KEY)", i)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() int {
		t.Helper()
		var name string
		var n int
		if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Opened_table_definitions'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		rules     []string
		most      int // table definitions read
		want, bad string
	}{
		{[]string{"shop.*", "!shop.b"}, 20, "[shop.a]", "[shop.c]"},
		{[]string{"s*.*", "!shop.b"}, 1000, "[shop.a]", "[shop.c]"},
	} {
		if _, err := db.ExecContext(ctx, "FLUSH TABLES"); err != nil {
			t.Fatal(err)
		}
		before := read()
		matched, refused, err := resolveRules(ctx, db, Config{Database: "shop", Filter: c.rules})
		if err != nil {
			t.Fatal(err)
		}
		n := read() - before
		var bad []string
		for _, r := range refused {
			name, _, _ := strings.Cut(r, ":")
			bad = append(bad, name)
		}
		if fmt.Sprint(matched) != c.want || fmt.Sprint(bad) != c.bad {
			t.Errorf("rules %v matched %v and refused %v; want %s and %s", c.rules, matched, refused, c.want, c.bad)
		}
		if n > c.most || (c.most == 1000 && n < 200) {
			t.Errorf("rules %v read %d table definitions", c.rules, n)
		}
	}
}
