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
// Its directory is a short path of its own: the server's socket path
// must fit in a Unix socket's, which a test's temporary directory may
// not.
func Start(t testing.TB, setup string) *pgserver.Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdcctl-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx := context.Background()
	pg, err := pgserver.Start(ctx, filepath.Join(dir, "data"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	if setup != "" {
		if _, err := pg.Psql(ctx, "postgres", setup); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}
