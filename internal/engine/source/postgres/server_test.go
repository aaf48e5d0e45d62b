package postgres

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// startDB starts a PostgreSQL server (with settings) for the test, with
// an empty database db.
func startDB(t testing.TB, db string, settings ...string) *pgserver.Server {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, filepath.Join(t.TempDir(), "pg"), 0, settings...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if _, err := srv.Psql(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	return srv
}

// StartDB is startDB for the package's external tests.
var StartDB = startDB

// BareRead is bareRead for the package's external benchmarks.
var BareRead = bareRead
