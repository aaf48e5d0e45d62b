// Package mysqltest starts a private MariaDB for one test, on loopback,
// with an empty database; it ends with the test. Without MariaDB
// installed the test is skipped (.ci/run installs it).
package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver Open uses

	"github.com/cdcctl/cdcctl/internal/mysqlserver"
)

// Start returns the server and the DSN of an empty database db.
func Start(t testing.TB, db string) (*mysqlserver.Server, string) {
	t.Helper()
	return StartWith(t, db, mysqlserver.Options{})
}

// StartWith is Start with server options (a binary log, say).
func StartWith(t testing.TB, db string, opts mysqlserver.Options) (*mysqlserver.Server, string) {
	t.Helper()
	srv, err := mysqlserver.StartWith(context.Background(), t.TempDir(), 0, opts)
	if errors.Is(err, mysqlserver.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	dsn, err := srv.CreateDatabase(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return srv, dsn
}

// StartShop starts a server with a binary log (and serverArgs) and an
// empty database shop, and returns the server and a connection to shop:
// how the MySQL source's tests begin.
func StartShop(t testing.TB, serverArgs ...string) (*mysqlserver.Server, *sql.DB) {
	t.Helper()
	srv, dsn := StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: serverArgs})
	return srv, Open(t, dsn)
}

// Open opens dsn for the rest of the test.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Exec runs each statement on db, failing the test on the first refused.
func Exec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// PurgeBinaryLogs starts a new binary log file and purges every one
// before it, as an operator's PURGE BINARY LOGS does, and returns the
// new file's name. The server keeps a file a reader still has open, and
// MariaDB one until InnoDB's checkpoint of it is written: it purges
// again until they are gone, 30 s at most.
func PurgeBinaryLogs(t testing.TB, db *sql.DB) string {
	t.Helper()
	Exec(t, db, "FLUSH BINARY LOGS")
	var last string
	var pos uint32
	var ignored sql.NullString
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&last, &pos, &ignored, &ignored); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		Exec(t, db, "PURGE BINARY LOGS TO '"+last+"'")
		var name string
		var size int64
		if err := db.QueryRow("SHOW BINARY LOGS").Scan(&name, &size); err == nil && name == last {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("the binary logs before %s are still there after 30 s", last)
		}
	}
}

// WideTables creates tables wide_00, wide_01, … each keyed by id with
// columns INT columns more (measurement_0000, …), and returns their
// names: a position of many columns.
func WideTables(t testing.TB, db *sql.DB, tables, columns int) []string {
	t.Helper()
	cols := make([]string, columns)
	for i := range cols {
		cols[i] = fmt.Sprintf("measurement_%04d INT", i)
	}
	names := make([]string, tables)
	for i := range names {
		names[i] = fmt.Sprintf("wide_%02d", i)
		Exec(t, db, fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, %s)", names[i], strings.Join(cols, ", ")))
	}
	return names
}
