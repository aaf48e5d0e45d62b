package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
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
	conn := keysConn(t)
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
	opened := func(name string) int {
		t.Helper()
		var n int
		if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE '"+name+"'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec("FLUSH TABLES")
	before, defs := opened("Opened_tables"), opened("Opened_table_definitions")
	st, err := readTable(ctx, conn, "keys.k")
	if err != nil {
		t.Fatal(err)
	}
	if n, d := opened("Opened_tables")-before, opened("Opened_table_definitions")-defs; n > 5 || d > 5 {
		t.Errorf("reading keys.k's definition opened %d tables and read %d definitions; want only its (the catalog's queries must name it by constants)", n, d)
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
	// A table in a uca1400 collation (MariaDB 10.10+), which COLLATIONS
	// does not name: its default set is its collation's (a column added
	// without one takes it), not unknown.
	if _, err := conn.ExecContext(ctx, "CREATE TABLE keys.u (id INT PRIMARY KEY) COLLATE ucs2_uca1400_ai_ci"); err != nil {
		t.Logf("no uca1400 collations on this server (MariaDB 10.10+): %v", err)
	} else {
		if st, err := readTable(ctx, conn, "keys.u"); err != nil || st.DefaultCharset != "ucs2" {
			t.Errorf("keys.u's default character set %q (%v); want ucs2", st.DefaultCharset, err)
		}
		if cs, err := tableCharset(ctx, conn, "keys.u"); err != nil || cs != "ucs2" {
			t.Errorf("keys.u's default character set for the history %q (%v); want ucs2", cs, err)
		}
	}
	if _, err := readTable(ctx, conn, "keys.missing"); !errors.Is(err, errNoTable) {
		t.Errorf("a missing table's definition read: %v; want errNoTable", err)
	}
}

// Following table rules that name their databases reads the catalog of
// those databases only, in a few queries however many tables match: the
// server's other tables' definitions are not read each time the rules
// are followed, nor is each table asked about one by one (three queries
// a table took 1.1 s a round for 1,000 tables). A rule with a wildcard
// in its database still lists every database and matches the same way.
// The tables refused are refused for tableUnfit's reasons (the check a
// changefeed's creation makes of each table), also for a user that may
// only SELECT them, who sees the tables' keys as root does.
func TestRulesThatNameTheirDatabaseReadOnlyItsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn := mysqltest.Start(t, "shop")
	root, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{"CREATE DATABASE elsewhere", "CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(10))", "CREATE TABLE shop.b (id INT PRIMARY KEY)", "CREATE TABLE shop.c (v INT)",
		"CREATE TABLE shop.d (id INT PRIMARY KEY, u VARCHAR(10) CHARACTER SET utf8mb4, s VARCHAR(10) CHARACTER SET swe7, k VARCHAR(10) CHARACTER SET keybcs2)",
		"CREATE VIEW shop.v AS SELECT id FROM shop.a",
		"CREATE DATABASE Shop", "CREATE TABLE Shop.z (id INT PRIMARY KEY)",
		"CREATE USER reader@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON shop.* TO reader@'%'", "GRANT SELECT ON Shop.* TO reader@'%'"} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i := range 200 {
		if _, err := root.ExecContext(ctx, fmt.Sprintf("CREATE TABLE elsewhere.t%d (id INT PRIMARY KEY)", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, user := range []string{"root", "reader"} {
		db := root
		if user == "reader" {
			if db, err = sql.Open("mysql", "reader:pw@tcp("+srv.Addr()+")/shop"); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
		}
		db.SetMaxOpenConns(1) // the session whose status is read is the rules'
		// What a held table's remedy asks before the changefeed copies it
		// again by itself: a SELECT-only user sees the key too.
		catalog := func() (*sql.DB, error) { return db, nil }
		if !hasPrimaryKey(ctx, catalog, "shop.a") || hasPrimaryKey(ctx, catalog, "shop.c") {
			t.Errorf("%s: shop.a has a primary key: %v, shop.c: %v; want true and false", user, hasPrimaryKey(ctx, catalog, "shop.a"), hasPrimaryKey(ctx, catalog, "shop.c"))
		}
		status := func(name string) int {
			t.Helper()
			var n int
			if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE '"+name+"'").Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		read := func() int { return status("Opened_table_definitions") }
		for _, c := range []struct {
			rules   []string
			most    int // table definitions read
			matched string
			queries int
		}{
			{[]string{"shop.*", "!shop.b"}, 20, "[shop.a]", 7},
			{[]string{"s*.*", "!shop.b"}, 20, "[shop.a]", 7},
			// Shop and shop, one database to the catalog's collation:
			// each is listed.
			{[]string{"*.*", "!shop.b", "!elsewhere.*"}, 1000, `["Shop".z shop.a]`, 11},
			{[]string{"[sS]hop.*", "!shop.b"}, 20, `["Shop".z shop.a]`, 10},
		} {
			if _, err := root.ExecContext(ctx, "FLUSH TABLES"); err != nil {
				t.Fatal(err)
			}
			before, asked := read(), status("Questions")
			matched, refused, err := resolveRules(ctx, db, Config{Database: "shop", Filter: c.rules})
			if err != nil {
				t.Fatal(err)
			}
			n := read() - before
			// The setting, the databases, the listing and two queries of
			// shop (and the status read).
			if q := status("Questions") - asked; q > c.queries {
				t.Errorf("%s: rules %v asked %d queries", user, c.rules, q)
			}
			if fmt.Sprint(matched) != c.matched || len(refused) != 2 {
				t.Fatalf("%s: rules %v matched %v and refused %q; want %s, and shop.c and shop.d refused", user, c.rules, matched, refused, c.matched)
			}
			for i, table := range []string{"shop.c", "shop.d"} {
				want := table + ": " + tableUnfit(ctx, db, table) + "; or exclude it with !" + table
				if refused[i] != want {
					t.Errorf("%s: rules %v refused\n%s\nwant (tableUnfit's reason)\n%s", user, c.rules, refused[i], want)
				}
			}
			if n > c.most {
				t.Errorf("%s: rules %v read %d table definitions", user, c.rules, n)
			}
		}
	}
	if why := tableUnfit(ctx, root, "shop.d"); !strings.Contains(why, "column s ") {
		t.Errorf("shop.d refused for %q; want its first column in a set the reader does not decode, s", why)
	}
}

// A foreign key's rules as SHOW CREATE TABLE writes them: a rule left
// out is RESTRICT, a key to another database names it, a name with a
// backquote or a newline is unquoted, and a column's comment holding a
// key's words is no key.
func TestForeignKeysAreReadFromShowCreateTable(t *testing.T) {
	create := "CREATE TABLE `c` (\n  `id` int(11) NOT NULL,\n  `p` int(11) DEFAULT NULL COMMENT 'CONSTRAINT `old` FOREIGN KEY (`p`) REFERENCES `par` (`id`) ON DELETE CASCADE',\n  `q` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n" +
		"  CONSTRAINT `c_ibfk_1` FOREIGN KEY (`p`) REFERENCES `par` (`id`) ON DELETE CASCADE,\n" +
		"  CONSTRAINT `we``ird\nkey` FOREIGN KEY (`q`, `p`) REFERENCES `other`.`t` (`a`, `b`) ON DELETE SET NULL ON UPDATE CASCADE,\n" +
		"  CONSTRAINT `plain` FOREIGN KEY (`q)`) REFERENCES `par` (`id`)\n) ENGINE=InnoDB"
	got := fmt.Sprintf("%q", foreignKeysIn(create, "shop"))
	want := `[{"c_ibfk_1" "shop" "par" "CASCADE" "RESTRICT"} {"we` + "`" + `ird\nkey" "other" "t" "SET NULL" "CASCADE"} {"plain" "shop" "par" "RESTRICT" "RESTRICT"}]`
	if got != want {
		t.Fatalf("foreign keys\n got %s\nwant %s", got, want)
	}
}

// A key written as SHOW CREATE TABLE writes it is read back as it was,
// whatever its names hold.
func FuzzForeignKeysIn(f *testing.F) {
	f.Add("a", "b", "c", 1, 0)
	f.Add("we`ird\nname", "ta)ble", "", 3, 2)
	f.Fuzz(func(t *testing.T, name, refDB, refTable string, onDelete, onUpdate int) {
		if name == "" || refTable == "" || strings.ContainsRune(name+refDB+refTable, 0) {
			return
		}
		rules := []string{"RESTRICT", "CASCADE", "SET NULL", "NO ACTION"}
		del, upd := rules[(onDelete%4+4)%4], rules[(onUpdate%4+4)%4]
		q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
		ref := q(refTable)
		if refDB != "" {
			ref = q(refDB) + "." + ref
		}
		line := "  CONSTRAINT " + q(name) + " FOREIGN KEY (`x`) REFERENCES " + ref + " (`y`)"
		if del != "RESTRICT" {
			line += " ON DELETE " + del
		}
		if upd != "RESTRICT" {
			line += " ON UPDATE " + upd
		}
		got := foreignKeysIn("CREATE TABLE `t` (\n  `x` int,\n"+line+"\n) ENGINE=InnoDB", "s")
		want := foreignKey{name: name, refSchema: cmp.Or(refDB, "s"), refTable: refTable, onDelete: del, onUpdate: upd}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("%q read as %+v; want %+v", line, got, want)
		}
	})
}

// Every collation id the server knows that setsByCollation has not (the
// uca1400 ones of MariaDB 10.10+, which COLLATIONS does not list) names
// its set through collationSet, as the server's
// COLLATION_CHARACTER_SET_APPLICABILITY says: a row's table map names a
// column's collation by that id.
func TestUCA1400CollationIDsNameTheirSets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rows, err := keysConn(t).QueryContext(ctx, "SELECT ID, CHARACTER_SET_NAME, FULL_COLLATION_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
	if err != nil {
		t.Skipf("the server has no uca1400 collations (MariaDB 10.10+): %v", err)
	}
	defer rows.Close()
	checked := 0
	for rows.Next() {
		var id uint64
		var set, name string
		if err := rows.Scan(&id, &set, &name); err != nil {
			t.Fatal(err)
		}
		if _, known := setsByCollation[id]; known {
			continue
		}
		checked++
		if got, ok := collationSet(id); !ok || got != utf8As4(set) {
			t.Errorf("collation %s (id %d) names set %q (%v); the server says %s", name, id, got, ok, set)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 900 {
		t.Fatalf("%d collations checked; MariaDB 10.11 has 920 uca1400 ones", checked)
	}
}
