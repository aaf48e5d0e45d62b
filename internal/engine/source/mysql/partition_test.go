package mysql_test

import (
	"database/sql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	driver "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Partition maintenance writes no row events. Dropping or truncating a
// partition (a time-partitioned table's retention) takes rows away: the
// table goes on and the sink keeps those rows, as PostgreSQL's dropped
// partitions'. Exchanging a partition with another table brings rows in
// that the sink would never get: both tables are held, to be copied
// again, and other tables go on.
func TestPartitionMaintenanceEitherGoesOnOrHolds(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "pt,swap,other", nil, "CREATE TABLE pt (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (100), PARTITION p2 VALUES LESS THAN MAXVALUE)",
		"CREATE TABLE swap (id INT PRIMARY KEY, v INT)", "CREATE TABLE other (id INT PRIMARY KEY)")
	dsn, p, log := up.dsn, up.p, up.log
	exec(t, dsn, "INSERT INTO pt VALUES (1, 1), (2, 2), (50, 50), (150, 150)",
		"ALTER TABLE pt TRUNCATE PARTITION p0", "ALTER TABLE pt DROP PARTITION p1", "INSERT INTO pt VALUES (3, 3)")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held after dropping and truncating partitions: %v", held)
	}
	got := rebuild(slices.DeleteFunc(slices.Clone(evs), func(e source.Event) bool { return e.Table != "shop.pt" }))
	want := selectAll(t, dsn, "pt")
	for _, k := range []string{"1", "2", "50"} {
		want[k] = []string{k, k} // kept in the sink
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt from the binary log:\n%q\nwant the table and the rows its partitions' drops took away:\n%q", got, want)
	}

	exec(t, dsn, "INSERT INTO swap VALUES (7, 7)", "ALTER TABLE pt EXCHANGE PARTITION p0 WITH TABLE swap",
		"INSERT INTO other VALUES (1)")
	waitResolved(t, log)
	evs, _, held = log.state()
	if len(held) != 2 || held["shop.pt"] == 0 || held["shop.swap"] == 0 {
		t.Fatalf("held after a partition's exchange: %v, want pt and swap", held)
	}
	if last := evs[len(evs)-1]; last.Table != "shop.other" {
		t.Fatalf("the last change is of %s, want the other table's insert after the exchange", last.Table)
	}
	for _, i := range p.TableIssues() {
		if !strings.Contains(i.Reason, "exchanged with another table's upstream") || !strings.Contains(i.Reason, "--copy-table "+i.Table) {
			t.Fatalf("%s: %s", i.Table, i.Reason)
		}
	}
}

// A session that writes with binlog_format STATEMENT (or MIXED: a
// connection pool opened before SET GLOBAL binlog_format = ROW keeps its
// format) logs its row changes as statements, which carry no rows: the
// tables they wrote are held, saying so and how to fix it, and the
// others go on. They were passed over, the rows lost without a word.
func TestRowChangesLoggedAsStatementsHoldTheirTables(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,audit,other,loaded,spare", nil, "CREATE TABLE orders (id INT PRIMARY KEY, v INT)",
		"CREATE TABLE audit (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)",
		"CREATE TABLE loaded (id INT PRIMARY KEY)", "CREATE TABLE spare (id INT PRIMARY KEY)")
	rows := filepath.Join(t.TempDir(), "rows.tsv")
	if err := os.WriteFile(rows, []byte("1\n2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	driver.RegisterLocalFile(rows)
	defer driver.DeregisterLocalFile(rows)
	db, err := sql.Open("mysql", up.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one session, its binlog_format
	mysqltest.Exec(t, db, "SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO orders (id, v) VALUES (1, 1)",
		"BEGIN", "INSERT INTO other VALUES (9)", "UPDATE audit SET id = id + 1 WHERE id > 100", "COMMIT",
		"LOAD DATA LOCAL INFILE '"+rows+"' INTO TABLE loaded",
		"SET SESSION binlog_format = 'ROW'")
	exec(t, up.dsn, "INSERT INTO other VALUES (1)", "INSERT INTO spare VALUES (1)")
	waitResolved(t, up.log)
	evs, _, held := up.log.state()
	if len(held) != 4 || held["shop.orders"] == 0 || held["shop.audit"] == 0 || held["shop.other"] == 0 || held["shop.loaded"] == 0 {
		t.Fatalf("held after row changes logged as statements: %v, want orders, audit, other and loaded", held)
	}
	spare := false
	for _, e := range evs {
		spare = spare || e.Table == "shop.spare" && e.Kind == source.KindDML
	}
	if !spare {
		t.Fatal("the row of the table no statement wrote did not arrive")
	}
	for _, i := range up.p.TableIssues() {
		if !strings.Contains(i.Reason, "binlog_format STATEMENT or MIXED") || !strings.Contains(i.Reason, "SET GLOBAL binlog_format = ROW") {
			t.Fatalf("%s: %s", i.Table, i.Reason)
		}
	}
	for _, e := range evs {
		if e.Table == "shop.other" && e.Kind == source.KindDML {
			t.Fatalf("a row of the held table other arrived: %+v", e)
		}
	}
}

// A stored function that writes rows, called by a session writing
// statements (SELECT f(…), DO f(…), SET @v = f(…): the server logs each
// as SELECT `shop`.`f`(…)), leaves no row and names no table in the
// binary log: every table of the changefeed is held, the reason naming
// the call and the fix. Before, its rows were lost without a word.
func TestAStoredFunctionsWritesLoggedAsAStatementHoldEveryTable(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,audit", []string{"--log-bin-trust-function-creators=1"},
		"CREATE TABLE orders (id INT PRIMARY KEY, v INT)", "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, n INT)",
		"CREATE FUNCTION f(x INT) RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO audit (n) VALUES (x); RETURN x; END")
	for _, call := range []string{"SELECT f(7)", "DO f(8)", "SET @v = f(9)"} {
		db, err := sql.Open("mysql", up.dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1) // one session, its binlog_format
		mysqltest.Exec(t, db, "SET SESSION binlog_format = 'STATEMENT'", call)
		db.Close()
	}
	waitResolved(t, up.log)
	_, _, held := up.log.state()
	if len(held) != 2 || held["shop.orders"] == 0 || held["shop.audit"] == 0 {
		t.Fatalf("held after a stored function's writes logged as a statement: %v, want orders and audit", held)
	}
	for _, i := range up.p.TableIssues() {
		if !strings.Contains(i.Reason, "SELECT `shop`.`f`(7)") || !strings.Contains(i.Reason, "stored function") || !strings.Contains(i.Reason, "SET GLOBAL binlog_format = ROW") {
			t.Fatalf("%s: %s", i.Table, i.Reason)
		}
	}
}

// A session that logs rows without every column (binlog_row_image MINIMAL
// or NOBLOB, set for the session or globally after the preflight) holds
// the tables it wrote, naming the columns and the fix, and the others go
// on. Before, a column left out reached the sink as NULL: an update's
// unchanged text, an insert's columns it did not name.
func TestRowsLoggedWithoutEveryColumnHoldTheirTables(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "notes,orders,other", nil, "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT, n INT)",
		"CREATE TABLE orders (id INT PRIMARY KEY, v INT, w INT DEFAULT 5)", "CREATE TABLE other (id INT PRIMARY KEY)")
	exec(t, up.dsn, "INSERT INTO notes VALUES (1, 'long text', 1)", "INSERT INTO orders VALUES (1, 1, 1)")
	db, err := sql.Open("mysql", up.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one session, its binlog_row_image
	mysqltest.Exec(t, db, "SET SESSION binlog_row_image = 'NOBLOB'", "UPDATE notes SET n = 2 WHERE id = 1",
		"SET SESSION binlog_row_image = 'MINIMAL'", "INSERT INTO orders (id, v) VALUES (2, 2)",
		"SET SESSION binlog_row_image = 'FULL'")
	exec(t, up.dsn, "INSERT INTO other VALUES (1)")
	waitResolved(t, up.log)
	evs, _, held := up.log.state()
	if len(held) != 2 || held["shop.notes"] == 0 || held["shop.orders"] == 0 {
		t.Fatalf("held after rows logged without every column: %v, want notes and orders", held)
	}
	other := false
	for _, e := range evs {
		other = other || e.Table == "shop.other" && e.Kind == source.KindDML
		if e.Kind == source.KindDML && (e.Table == "shop.notes" && e.Op == source.OpUpdate || e.Table == "shop.orders" && e.Key != "" && len(e.New) > 0 && e.New[0].Text == "2") {
			t.Fatalf("a row logged without every column arrived: %+v", e)
		}
	}
	if !other {
		t.Fatal("the row of the other table did not arrive")
	}
	for _, i := range up.p.TableIssues() {
		cols := map[string]string{"shop.notes": "columns body:", "shop.orders": "columns w:"}[i.Table]
		if !strings.Contains(i.Reason, cols) || !strings.Contains(i.Reason, "SET GLOBAL binlog_row_image = FULL") || !strings.Contains(i.Reason, "--copy-table "+i.Table) {
			t.Fatalf("%s: %s", i.Table, i.Reason)
		}
	}
}

// A session writing statements that makes a temporary table under a
// replicated table's name, then writes, empties, alters, renames and
// drops it, changes nothing of the replicated table: no TRUNCATE, no
// schema change, no hold, no end; its rows arrive as before. Another
// session's TRUNCATE of the replicated table meanwhile is the replicated
// table's, and so is the first session's once its temporary table is
// gone. Before, the sink's copy was emptied, its schema changed and the
// table ended.
func TestASessionsTemporaryTableHidesNothingOfTheReplicatedOne(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", nil, "CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(20))")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1, 'real'), (2, 'real')")
	session := func() *sql.DB {
		db, err := sql.Open("mysql", up.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1) // one session: its temporary table, its binlog_format
		mysqltest.Exec(t, db, "SET SESSION binlog_format = 'STATEMENT'")
		return db
	}
	a, b := session(), session()
	mysqltest.Exec(t, a, "CREATE TEMPORARY TABLE orders (id INT PRIMARY KEY, v VARCHAR(20))", "INSERT INTO orders VALUES (100, 'temporary')",
		"TRUNCATE orders", "ALTER TABLE orders ADD COLUMN extra INT")
	mysqltest.Exec(t, b, "TRUNCATE orders") // the replicated table's
	mysqltest.Exec(t, a, "RENAME TABLE orders TO scratch", "CREATE OR REPLACE TEMPORARY TABLE orders (id INT PRIMARY KEY)",
		"DROP TABLE orders", "DROP TABLE scratch")
	exec(t, up.dsn, "INSERT INTO orders VALUES (3, 'real')")
	waitResolved(t, up.log)
	evs, _, held := up.log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	truncates := func(evs []source.Event) int {
		n := 0
		for _, e := range evs {
			switch {
			case e.Kind != source.KindDDL:
			case strings.HasPrefix(e.Statement, source.TruncatePrefix):
				n++
			default:
				t.Fatalf("a schema change of the replicated table from the session's temporary one: %s", e.Statement)
			}
		}
		return n
	}
	if n := truncates(evs); n != 1 {
		t.Fatalf("%d TRUNCATEs of the replicated table, want the other session's one", n)
	}
	// Rebuilt from the TRUNCATE on (rebuild passes over schema changes).
	since := slices.IndexFunc(evs, func(e source.Event) bool { return e.Kind == source.KindDDL })
	if got, want := rebuild(evs[since+1:]), selectAll(t, up.dsn, "orders"); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt %q, the table %q", got, want)
	}
	// The temporary tables gone, the name is the replicated table's again.
	mysqltest.Exec(t, a, "TRUNCATE orders")
	exec(t, up.dsn, "INSERT INTO orders VALUES (4, 'real')")
	waitResolved(t, up.log)
	if evs, _, _ = up.log.state(); truncates(evs) != 2 {
		t.Fatal("the TRUNCATE of the replicated table, once the temporary one was dropped, did not arrive")
	}
}
