package pgserver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestStartsALogicalReplicationServerOnLoopback(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, filepath.Join(t.TempDir(), "pg"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	out, err := s.Psql(ctx, "postgres", "SHOW wal_level; SHOW listen_addresses;")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); len(got) != 2 || got[0] != "logical" || got[1] != "127.0.0.1" {
		t.Fatalf("settings %q", out)
	}
}

// A data directory whose socket path would be too long (a long TMPDIR,
// as CI's on tmpfs or macOS's) still gives a server, reached over TCP.
func TestStartsUnderADirectoryTooLongForASocket(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100), "pg")
	s, err := Start(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if out, err := s.Psql(ctx, "postgres", "SHOW unix_socket_directories;"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("unix_socket_directories %q, %v", out, err)
	}
}
