package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A changefeed whose source URI holds a password goes on after the
// password is rotated upstream. While the server refuses the old one the
// changefeed says so and stands still; a wrong new password is refused
// before anything is written; paused, given the new one by an update of
// its source's connection, and resumed, it streams from where it stopped
// under a live workload. Its table rebuilt from the sink equals the
// upstream's, nothing twice.
func TestARotatedPasswordIsGivenToTheChangefeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	// The test server trusts every login; the changefeed's user gives a
	// password.
	hba := "local all all trust\nhost all rot 127.0.0.1/32 scram-sha-256\nhost replication rot 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(srv.Dir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", `
CREATE ROLE rot LOGIN SUPERUSER PASSWORD 'one';
CREATE TABLE a (id int8 PRIMARY KEY, n int4, c int4);
INSERT INTO a SELECT g, 0, g FROM generate_series(1, 2000) g;
SELECT pg_reload_conf();`); err != nil {
		t.Fatal(err)
	}
	super := srv.DSN("shop")
	as := func(password string) string {
		return fmt.Sprintf("postgres://rot:%s@127.0.0.1:%d/shop?sslmode=disable", password, srv.Port)
	}
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("rotated", as("one")+"&tables=public.a&chunk-rows=500", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("rotated")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, super, stop, "a") }()
	time.Sleep(300 * time.Millisecond)

	// Rotated upstream; the reader's connection is cut, and its next
	// login refused.
	if _, err := srv.Psql(ctx, "shop", `ALTER ROLE rot PASSWORD 'two';
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'rot';`); err != nil {
		t.Fatal(err)
	}
	tc.Eventually("the changefeed says the login is refused", time.Minute, func() bool {
		return strings.Contains(tc.Changefeed("rotated").Status.Error, "check the user and password")
	})
	tc.SetState("rotated", model.ChangefeedPaused)

	tc.GiveNewPassword("rotated", as, "three", "two")
	cfg, err := postgres.ParseURI(tc.Changefeed("rotated").Info.SourceURI)
	if err != nil || len(cfg.Tables) != 1 || cfg.Tables[0] != "public.a" || cfg.ChunkRows != 500 || !strings.Contains(cfg.ConnString, "rot:two@") {
		t.Fatalf("after the update the changefeed's source is %+v (%v)", cfg, err)
	}
	tc.SetState("rotated", model.ChangefeedNormal)
	time.Sleep(time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(super + "&tables=public.a")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("rotated", up, []string{"public.a"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the password was rotated: %+v", rep)
	}
}

// A changefeed's connection pointed by mistake at a server of another
// database cluster (a new server given its database, its table and a
// slot of the changefeed's name) is refused before anything is written,
// naming the other cluster: its resume point names the cluster it was
// read from, and an LSN means nothing on another's. The changefeed goes
// on where it is; the table rebuilt from the sink equals the first
// server's, nothing of the other server's in it, nothing lost or twice.
// (The reader makes the same check when it starts: a DNS name moved to
// another cluster fails the changefeed, saying so; stream_test.go.)
func TestAConnectionToAServerOfAnotherClusterIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, other := pgtest.StartDB(t, "shop"), pgtest.StartDB(t, "shop")
	const table = `CREATE TABLE a (id int8 PRIMARY KEY, n int4, c int4);`
	if _, err := first.Psql(ctx, "shop", table+`INSERT INTO a SELECT g, 0, g FROM generate_series(1, 2000) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := first.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("elsewhere", dsn+"&tables=public.a&chunk-rows=500", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("elsewhere")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "a") }()
	tc.Eventually("a resume point that names its cluster", 30*time.Second, func() bool {
		return strings.Contains(string(tc.Changefeed("elsewhere").Status.SourcePosition), `"system":"`)
	})
	tc.SetState("elsewhere", model.ChangefeedPaused)
	stored := tc.Changefeed("elsewhere").Info.SourceURI
	cfg, err := postgres.ParseURI(stored)
	if err != nil || cfg.Slot == "" {
		t.Fatalf("the stored source %v: %v", cfg, err)
	}
	for _, sql := range []string{table, `SELECT pg_create_logical_replication_slot('` + cfg.Slot + `', 'pgoutput')`, `INSERT INTO a VALUES (900001, 1, 1)`} {
		if _, err := other.Psql(ctx, "shop", sql); err != nil {
			t.Fatal(err)
		}
	}
	_, err = tc.UpdateSource("elsewhere", other.DSN("shop"), false)
	if err == nil || !strings.Contains(err.Error(), "is another database cluster") || !strings.Contains(err.Error(), "nothing changed: the changefeed keeps its connection") {
		t.Fatalf("pointed at a server of another cluster: %v; want a refusal naming it", err)
	}
	if got := tc.Changefeed("elsewhere").Info.SourceURI; got != stored {
		t.Fatalf("after the refusal the source is %s; want %s", got, stored)
	}
	tc.SetState("elsewhere", model.ChangefeedNormal)
	time.Sleep(time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.a")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("elsewhere", up, []string{"public.a"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the refused update: %+v", rep)
	}
}
