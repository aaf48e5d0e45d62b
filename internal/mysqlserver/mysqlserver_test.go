package mysqlserver

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A directory whose socket path would be too long (a long TMPDIR, as
// CI's on tmpfs or macOS's) still gives a server, its socket elsewhere,
// removed when it stops; and Start returns only once the server answers
// as MariaDB.
func TestStartsUnderADirectoryTooLongForASocket(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, filepath.Join(t.TempDir(), strings.Repeat("d", 100)), 0)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sock string
	if err := db.QueryRowContext(ctx, "SELECT @@socket").Scan(&sock); err != nil {
		t.Fatal(err)
	}
	if len(sock) >= 100 || !strings.HasPrefix(sock, "/tmp/") {
		t.Fatalf("socket at %q", sock)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Fatalf("the socket's directory is left after Stop: %v", err)
	}
}
