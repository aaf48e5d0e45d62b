package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The catalog knows the server's version from what the server said when
// the connection started, as current_setting('server_version_num')
// says it, without asking: each chunk of a snapshot makes a catalog.
func TestTheServerVersionIsReadFromTheConnectionsStart(t *testing.T) {
	cases := map[string]int{
		"15.4": 150004, "15.4 (Debian 15.4-1.pgdg120+1)": 150004, "17devel": 170000, "16beta2": 160000,
		"18rc1": 180000, "10.23": 100023, "9.6.24": 90624, "13.0": 130000,
	}
	for s, want := range cases {
		if got, ok := versionNum(s); !ok || got != want {
			t.Errorf("versionNum(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "devel", "9.6", "0.1", "x15.4", "1234567.1"} {
		if got, ok := versionNum(s); ok {
			t.Errorf("versionNum(%q) = %d, want none (then the catalog asks)", s, got)
		}
	}
	_, dsn := newDB(t, `SELECT 1`)
	cfg, err := ParseURI(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var want int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	if got, err := cat.serverVersion(ctx); err != nil || got != want {
		t.Fatalf("the catalog says the server is %d (%v); it says %d", got, err, want)
	}
	if got, ok := versionNum(conn.PgConn().ParameterStatus("server_version")); !ok || got != want {
		t.Fatalf("server_version %q is read as %d, %v; the server says %d", conn.PgConn().ParameterStatus("server_version"), got, ok, want)
	}
}

func FuzzVersionNum(f *testing.F) {
	for _, s := range []string{"15.4", "9.6.24", "17devel", "16beta2 (x)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := versionNum(s)
		if ok && (v < 10000 || v > 999999*10000+9999) {
			t.Fatalf("versionNum(%q) = %d", s, v)
		}
	})
}
