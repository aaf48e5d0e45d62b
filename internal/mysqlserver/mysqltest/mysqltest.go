// Package mysqltest starts a private MariaDB for one test, on loopback,
// with an empty database; it ends with the test. Without MariaDB
// installed the test is skipped (.ci/run installs it).
package mysqltest

import (
	"context"
	"errors"
	"testing"

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
