package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// Without binlog_row_metadata=FULL the binary log names no column and
// says nothing of signedness or character sets: only the schema history
// (each ALTER TABLE applied at its own position to the schema the reader
// holds) knows what a row's columns were. Read live, then again from the
// first resume point behind all the changes (the catalog shows only the
// last schema, which has as many columns as the first rows), then from
// the point just after a column's rename (a change the rows' table map
// cannot show): every row is decoded with its own columns' names and
// values, at the same positions.
func TestRowsBehindSeveralAltersAreDecodedWithTheirOwnSchemaWithoutRowMetadata(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: []string{"--binlog-row-metadata=MINIMAL"}})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20), qty INT)")
	cfg := parse(t, uri(srv, "root", "orders"))
	first, err := mysql.Begin(context.Background(), cfg, model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	live := mysql.NewPuller(cfg, "cf", "mariadb", nil)
	log := pull(t, live, first)
	for _, step := range [][]string{
		{"INSERT INTO orders VALUES (1, 'a', 1)", "ALTER TABLE orders ADD COLUMN price DECIMAL(10,2) AFTER id", "INSERT INTO orders VALUES (2, 2.5, 'b', 2)"},
		{"ALTER TABLE orders RENAME COLUMN note TO memo", "INSERT INTO orders (id, price, memo, qty) VALUES (3, 3.5, 'c', 3)"},
		{"ALTER TABLE orders MODIFY memo VARCHAR(40) CHARACTER SET latin1", "INSERT INTO orders VALUES (4, 4, 'café', 4)", "UPDATE orders SET memo = 'über' WHERE id = 1"},
		{"ALTER TABLE orders CHANGE qty amount BIGINT UNSIGNED", "INSERT INTO orders VALUES (5, 5, 'e', 18446744073709551615)"},
		{"ALTER TABLE orders DROP COLUMN price, ADD COLUMN tag ENUM('x','y') FIRST", "INSERT INTO orders VALUES ('y', 6, 'f', 6)", "DELETE FROM orders WHERE id = 2"},
	} {
		exec(t, dsn, step...)
		waitResolved(t, log)
	}
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	names := func(evs []source.Event, withTypes bool, first ...string) []string {
		cols := first
		var out []string
		for _, e := range evs {
			if e.Kind == source.KindDDL {
				cols = cols[:0]
				var desc []string
				for _, c := range e.Def.Columns {
					cols = append(cols, c.Name)
					desc = append(desc, c.Name)
					if withTypes {
						desc[len(desc)-1] += " " + c.Type
					}
				}
				out = append(out, fmt.Sprintf("DDL v%d (%s) at %s", e.SchemaVersion, strings.Join(desc, ", "), e.CommitTs))
				continue
			}
			var vals []string
			for i, v := range e.Image() {
				text := v.Text
				if v.Null {
					text = "NULL"
				}
				vals = append(vals, cols[i]+"="+text)
			}
			out = append(out, fmt.Sprintf("%s v%d [%s] at %s", e.Op, e.SchemaVersion, strings.Join(vals, " "), e.CommitTs))
		}
		return out
	}
	got := names(evs, true, "id", "note", "qty")
	want := []string{
		"INSERT v0 [id=1 note=a qty=1]",
		"DDL v1 (id bigint(20), price decimal(10,2), note varchar(20), qty int(11))",
		"INSERT v1 [id=2 price=2.50 note=b qty=2]",
		"DDL v2 (id bigint(20), price decimal(10,2), memo varchar(20), qty int(11))",
		"INSERT v2 [id=3 price=3.50 memo=c qty=3]",
		"DDL v3 (id bigint(20), price decimal(10,2), memo varchar(40), qty int(11))",
		"INSERT v3 [id=4 price=4.00 memo=café qty=4]",
		"UPDATE v3 [id=1 price=NULL memo=über qty=1]",
		"DDL v4 (id bigint(20), price decimal(10,2), memo varchar(40), amount bigint(20) unsigned)",
		"INSERT v4 [id=5 price=5.00 memo=e amount=18446744073709551615]",
		"DDL v5 (tag enum('x','y'), id bigint(20), memo varchar(40), amount bigint(20) unsigned)",
		"INSERT v5 [tag=y id=6 memo=f amount=6]",
		"DELETE v5 [tag=NULL id=2 memo=b amount=2]",
	}
	var trimmed []string
	for _, g := range got {
		trimmed = append(trimmed, g[:strings.LastIndex(g, " at ")])
	}
	if strings.Join(trimmed, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read live:\n%s\nwant\n%s", strings.Join(trimmed, "\n"), strings.Join(want, "\n"))
	}

	// Behind every change: the same rows, names and positions (the types
	// the statements gave, not the catalog's later ones).
	other := cfg
	other.ServerID = 78
	behind := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
	waitResolved(t, behind)
	evs2, _, held2 := behind.state()
	if len(held2) != 0 {
		t.Fatalf("read behind its schema changes, held: %v", held2)
	}
	if a, b := strings.Join(names(evs2, false, "id", "note", "qty"), "\n"), strings.Join(names(evs, false, "id", "note", "qty"), "\n"); a != b {
		t.Fatalf("read behind the changes:\n%s\nlive:\n%s", a, b)
	}

	// From just after the rename: the resume point holds the renamed
	// column.
	var renamed model.Ts
	var after []source.Event
	for i, e := range evs {
		if e.Kind == source.KindDDL && e.SchemaVersion == 2 {
			renamed, after = e.CommitTs, evs[i+1:]
		}
	}
	from, ok := live.ResumePoint(renamed)
	if !ok {
		t.Fatalf("no resume point at %s", renamed)
	}
	third := cfg
	third.ServerID = 79
	again := pull(t, mysql.NewPuller(third, "cf", "mariadb", nil), from)
	waitResolved(t, again)
	evs3, _, _ := again.state()
	// (The resume point is at or before the checkpoint: what the reader
	// gives again up to it, the partitions have.)
	evs3 = slices.DeleteFunc(evs3, func(e source.Event) bool { return e.CommitTs <= renamed })
	if a, b := strings.Join(names(evs3, false, "id", "price", "memo", "qty"), "\n"), strings.Join(names(after, false, "id", "price", "memo", "qty"), "\n"); a != b {
		t.Fatalf("read from after the rename:\n%s\nlive:\n%s", a, b)
	}
}

// A column's type reads the same whether the schema history gave it (a
// reader behind a later change) or the catalog did: the history wrote
// "int" where MariaDB's catalog has "int(11)", and a sink's schema files
// showed both for one column as readers restarted. The history's types
// of one statement's columns, read from behind a later change, equal what
// the catalog said right after it.
func TestTheHistoryWritesTypesAsTheCatalogDoes(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "t", nil, "CREATE TABLE t (id BIGINT PRIMARY KEY)")
	exec(t, up.dsn, `ALTER TABLE t ADD COLUMN a INT, ADD b INT UNSIGNED, ADD c INT(5), ADD d TINYINT(1), ADD e BOOL,
		ADD f BIGINT UNSIGNED, ADD g SMALLINT ZEROFILL, ADD h MEDIUMINT, ADD i TINYINT, ADD j INTEGER, ADD k INT4 UNSIGNED,
		ADD l MEDIUMINT(3) UNSIGNED ZEROFILL, ADD m DECIMAL(12,3), ADD n FLOAT, ADD o DOUBLE, ADD p VARCHAR(10), ADD q DATETIME(6),
		ADD r TIME, ADD s YEAR, ADD u BIT(3), ADD v ENUM('x','y'), ADD w SET('a','b'), ADD x CHAR(2), ADD y BINARY(4)`)
	want := catalogTypes(t, up.dsn, "t")
	exec(t, up.dsn, "ALTER TABLE t DROP COLUMN y") // the catalog moves on

	other := up.cfg
	other.ServerID = 79 // beside the live reader
	behind := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), up.first)
	waitResolved(t, behind)
	evs, _, held := behind.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	var first *source.Event
	for i := range evs {
		if evs[i].Kind == source.KindDDL {
			first = &evs[i]
			break
		}
	}
	if first == nil {
		t.Fatal("no schema change read")
	}
	var got []string
	for _, c := range first.Def.Columns {
		got = append(got, c.Name+" "+c.Type)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("the history's types:\n%s\nthe catalog's:\n%s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

// catalogTypes are a table's columns and their types as the catalog
// writes them.
func catalogTypes(t *testing.T, dsn, table string) []string {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		out = append(out, name+" "+typ)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A column renamed right after a statement the history does not apply (a
// generated column added, with no row between) is followed from the
// catalog at the next row, as any ALTER after such a statement is: the
// table was held, with a remedy that copies it again, for a rename of a
// column.
func TestAColumnRenamedAfterAnUnfollowedStatementIsNotHeld(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", nil, "CREATE TABLE orders (id BIGINT PRIMARY KEY, a INT)")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1, 1)", "ALTER TABLE orders ADD COLUMN g INT AS (id + 1)", "ALTER TABLE orders RENAME COLUMN a TO b", "INSERT INTO orders (id, b) VALUES (2, 2)")
	waitResolved(t, up.log)
	if _, _, held := up.log.state(); len(held) != 0 {
		t.Fatalf("held after a column rename: %v", held)
	}
	if got := up.log.lines(t, true); !strings.Contains(got, "INSERT [2 2 3]") || !strings.Contains(got, "b int(11)") {
		t.Fatalf("read:\n%s", got)
	}
}

// A reader behind a CREATE INDEX and a later ALTER decodes the rows
// between them with their own schema: an index is passed over, so the
// ALTER is applied at its position. The CREATE INDEX made the catalog
// the schema of the next row, and the catalog had the ALTER's already:
// ENUM 'paid' read as 'new' (its index under the new members), the
// DATETIME(3)'s .250 cut.
func TestARowBetweenAnIndexAndALaterAlterIsReadWithItsOwnSchema(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", []string{"--binlog-row-metadata=MINIMAL"}, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status ENUM('new','paid'), paid_at DATETIME(3), qty INT)")
	exec(t, up.dsn, "CREATE INDEX i_qty ON orders (qty)",
		"INSERT INTO orders VALUES (1, 'paid', '2024-05-01 10:00:00.250', 3)",
		"ALTER TABLE orders MODIFY status ENUM('void','new','paid'), MODIFY paid_at DATETIME",
		"INSERT INTO orders VALUES (2, 'void', '2024-05-02 11:00:00', 4)")
	got := readFromTheStart(t, up)
	if !strings.Contains(got, "INSERT [1 paid 2024-05-01 10:00:00.250 3]") || !strings.Contains(got, "INSERT [2 void 2024-05-02 11:00:00 4]") {
		t.Fatalf("read from behind the index and the ALTER:\n%s", got)
	}
}

// Under lower_case_table_names (names stored in lower case, a statement
// may write them in any), a DROP, TRUNCATE or RENAME naming a replicated
// table in another letter case is read as naming it: the dropped table
// ends, the truncated one goes on truncated, the renamed one is held.
// Each was passed over as another table's: the renamed table's rows under
// its new name were lost without a word.
func TestStatementsNameTablesInAnyLetterCaseUnderLowerCaseTableNames(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,audit,moved", []string{"--lower-case-table-names=1"},
		"CREATE TABLE orders (id BIGINT PRIMARY KEY)", "CREATE TABLE audit (id BIGINT PRIMARY KEY)", "CREATE TABLE moved (id BIGINT PRIMARY KEY)")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1)", "INSERT INTO audit VALUES (1)", "INSERT INTO moved VALUES (1)",
		"TRUNCATE TABLE Audit", "DROP TABLE Orders", "RENAME TABLE Moved TO Moved_V2", "INSERT INTO audit VALUES (2)")
	waitResolved(t, up.log)
	_, _, held := up.log.state()
	if len(held) != 1 || held["shop.moved"] == 0 {
		t.Fatalf("held: %v; want shop.moved (renamed): %+v", held, up.p.TableIssues())
	}
	evs, _, _ := up.log.state()
	for _, want := range []string{source.TruncatePrefix + "`shop`.`audit`", source.DropPrefix + "`shop`.`orders`"} {
		if !slices.ContainsFunc(evs, func(e source.Event) bool { return e.Kind == source.KindDDL && e.Statement == want }) {
			t.Fatalf("no %q read", want)
		}
	}
}

// After a statement the history does not apply, the next row's schema is
// the catalog's only where the catalog's columns are the row's: a later
// DATETIME without fraction is not the row's DATETIME(3), nor a DECIMAL
// of another scale, nor an ENUM of other members (the table map carries
// the fraction digits and the decimal's shape always, the members with
// binlog_row_metadata=FULL). Taken for the row's, they cut .250, read 'paid'
// as 'new' and 1.25 as 1.3.
func TestARowIsNotReadWithALaterCatalogSchemaOfTheSameFamily(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", []string{"--binlog-row-metadata=FULL"}, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status ENUM('new','paid'), paid_at DATETIME(3), amount DECIMAL(6,2))")
	exec(t, up.dsn, "ALTER TABLE orders ADD COLUMN g INT AS (id + 1)",
		"INSERT INTO orders (id, status, paid_at, amount) VALUES (1, 'paid', '2024-05-01 10:00:00.250', 1.25)",
		"ALTER TABLE orders MODIFY status ENUM('void','new','paid'), MODIFY paid_at DATETIME, MODIFY amount DECIMAL(6,1)",
		"INSERT INTO orders (id, status, paid_at, amount) VALUES (2, 'void', '2024-05-02 11:00:00', 2.5)")
	got := readFromTheStart(t, up)
	if !strings.Contains(got, "INSERT [1 paid 2024-05-01 10:00:00.250 1.25 2]") || !strings.Contains(got, "INSERT [2 void 2024-05-02 11:00:00 2.5 3]") {
		t.Fatalf("read from behind both ALTERs:\n%s", got)
	}
}

// ENUM and SET members keep their letter case from the stream as the
// server shows them ('Paid', not 'paid'), and a table map with members
// in capitals agrees with the catalog (binlog_row_metadata=FULL): no
// schema change is made up for it at each transaction.
func TestEnumAndSetMembersKeepTheirCase(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", []string{"--binlog-row-metadata=FULL"}, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status ENUM('Paid','New'), roles SET('Admin','User'))")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1, 'Paid', 'Admin,User')", "INSERT INTO orders VALUES (2, 'New', 'User')")
	waitResolved(t, up.log)
	got := up.log.lines(t, true)
	if want := "INSERT [1 Paid Admin,User]\nINSERT [2 New User]"; got != want {
		t.Fatalf("read:\n%s\nwant\n%s", got, want)
	}
	if rows := selectAll(t, up.dsn, "orders"); rows["1"][1] != "Paid" {
		t.Fatalf("the server shows %q", rows["1"])
	}
}

// readFromTheStart reads the upstream's binary log again from where its
// reader began, with a second reader started now (behind everything the
// test wrote), and returns what it read.
func readFromTheStart(t *testing.T, up upstream) string {
	t.Helper()
	other := up.cfg
	other.ServerID = 78
	behind := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), up.first)
	waitResolved(t, behind)
	return behind.lines(t, true)
}

// Positions come from the binary log, whatever the catalog says when it
// is read: an ALTER the reader follows from the catalog (a generated
// column: not from its statement) gives its table a schema change at a
// position of its own; read again from before it, after a later ALTER
// moved the catalog on (without binlog_row_metadata=FULL the row's
// own schema cannot be built), the table is held instead, and the other
// table's transactions of the same second had positions one lower: a
// partition already past them would never read them again. Nor does the
// held table's next ALTER take a position the first read did not, nor a
// large transaction of it go in parts in one read and not the other, nor
// its DROP with another table's take one position fewer.
func TestPositionsDoNotDependOnTheCatalogWhenReadAgain(t *testing.T) {
	t.Parallel()
	// The table's first row after the ALTER: a transaction of its own,
	// or an XA transaction, whose schema change goes with the next
	// commit (the XA COMMIT here).
	for name, firstRow := range map[string][]string{
		"plain": {"INSERT INTO orders (id, note, qty) VALUES (1, 'a', 1)"},
		"XA": {"XA START 'x1'", "INSERT INTO orders (id, note, qty) VALUES (1, 'a', 1)", "XA END 'x1'", "XA PREPARE 'x1'",
			"XA COMMIT 'x1'"},
		// Large enough to go to the event log in parts, which fixes its
		// positions: whether the table is held or not.
		"parts": {"INSERT INTO orders (id, note, qty) SELECT seq, 'a', seq FROM seq_1_to_5000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: []string{"--binlog-row-metadata=MINIMAL"}})
			exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20), qty INT)", "CREATE TABLE items (id BIGINT PRIMARY KEY)",
				"CREATE TABLE spare (id BIGINT PRIMARY KEY)")
			cfg := parse(t, uri(srv, "root", "orders,items,spare"))
			first, err := mysql.Begin(context.Background(), cfg, model.TsFromTime(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			live := pull(t, mysql.NewPuller(cfg, "cf", "mariadb", nil), first)
			// One second of commits, as near as the statements can make it.
			stmts := append([]string{"INSERT INTO items VALUES (1)", "ALTER TABLE orders ADD COLUMN twice INT AS (qty * 2) VIRTUAL"}, firstRow...)
			exec(t, dsn, append(stmts, "INSERT INTO items VALUES (2)", "INSERT INTO items VALUES (3)")...)
			waitResolved(t, live)
			// The later ALTER, followed from its statement by the first
			// read; the second, holding the table, does not look at it
			// again. Then a DROP of it and another table: two ends in
			// the first read, one in the second.
			exec(t, dsn, "ALTER TABLE orders DROP COLUMN note", "INSERT INTO orders (id, qty) VALUES (90002, 2)",
				"INSERT INTO items VALUES (4)", "INSERT INTO items VALUES (5)", "DROP TABLE orders, spare", "INSERT INTO items VALUES (6)")
			waitResolved(t, live)
			positions := func(l *collected) []string {
				evs, _, _ := l.state()
				var out []string
				for _, e := range evs {
					if e.Table == "shop.items" && e.Kind == source.KindDML {
						out = append(out, fmt.Sprintf("items %s at %s", e.Key, e.CommitTs))
					}
				}
				return out
			}
			want := positions(live)
			other := cfg
			other.ServerID = 78
			again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
			waitResolved(t, again)
			if got := positions(again); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("read again from before the ALTERs:\n%s\nlive:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
