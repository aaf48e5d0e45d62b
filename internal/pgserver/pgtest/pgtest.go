// Package pgtest starts a private PostgreSQL for one test, on loopback,
// stopped when the test ends, with the statements given run in its
// database postgres.
package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// Start starts the server and runs setup (SQL) in its database postgres.
func Start(t testing.TB, setup string) *pgserver.Server {
	t.Helper()
	pg := start(t)
	if setup != "" {
		if _, err := pg.Psql(context.Background(), "postgres", setup); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}

// StartDB starts the server with settings (postgresql.conf lines) and
// creates an empty database db in it.
func StartDB(t testing.TB, db string, settings ...string) *pgserver.Server {
	t.Helper()
	pg := start(t, settings...)
	if _, err := pg.Psql(context.Background(), "postgres", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	return pg
}

// start starts the server in a directory that is a short path of its
// own: the server's socket path must fit in a Unix socket's, which a
// test's temporary directory may not.
func start(t testing.TB, settings ...string) *pgserver.Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdcctl-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg, err := pgserver.Start(context.Background(), filepath.Join(dir, "data"), 0, settings...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	return pg
}
