// Package mysqltest starts a private MariaDB for one test, on loopback,
// with an empty database; it ends with the test. Without MariaDB
// installed the test is skipped (.ci/run installs it).
package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"testing"

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
