package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// An update that removes a table and then cannot be stored in etcd
// leaves the table sending every change: the publication loses a
// removed table only once the change is stored. Before, the update took
// it out first and put it back when the write failed, and the changes
// made in between were never sent (a superuser's changefeed then held
// the table at resume; any other lost them without a word). Here the
// write of an update removing a fails, and a row is written to a just
// before it: after the resume, under a workload on both tables, a is not
// held, the row is in the sink, and the sink rebuilt equals the
// upstream's tables. The same update made again lands, and only then
// does a leave the publication.
func TestAnUpdateThatCannotBeStoredLosesNoChangeOfTheTablesItRemoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	for _, table := range []string{"a", "b"} {
		if _, err := srv.Psql(ctx, "shop", `CREATE TABLE `+table+` (id int8 PRIMARY KEY, n int4);
INSERT INTO `+table+` SELECT g, 0 FROM generate_series(1, `+n+`) g;`); err != nil {
			t.Fatal(err)
		}
	}
	dsn := srv.DSN("shop")
	const cf = "unstored"
	hook := enginetest.NewWriteHook(meta.NewKeys(enginetest.ClusterID).ChangefeedInfo(cf), nil, func(ctx context.Context, n int) {
		if n != 1 {
			return
		}
		// While the update is under way, the publication changed (it
		// was, before) and the write to come.
		if _, err := srv.Psql(ctx, "shop", `INSERT INTO a VALUES (0, -7)`); err != nil {
			t.Errorf("the row written during the update: %v", err)
		}
	}).FailWith(func(n int) error {
		if n == 1 {
			return status.Error(codes.Unknown, "the test refuses this write")
		}
		return nil
	})
	tc := enginetest.New(t, enginetest.Options{Interceptor: hook.Interceptor})
	tc.StartCaptures(2)
	dir := t.TempDir()
	tc.CreateChangefeed(cf, dsn+"&tables=public.a,public.b&chunk-rows=500", "file://"+dir+"?flush-interval=100ms", 2)
	tc.WaitSnapshot(cf)
	published := func() string {
		out, err := srv.Psql(ctx, "shop", `SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'cdcctl_`+cf+`'`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	stop := updating(ctx, srv, "shop", func(i int) string {
		id := 1 + i%retypedRows
		return fmt.Sprintf("UPDATE a SET n = n + 1 WHERE id = %d; UPDATE b SET n = n + 1 WHERE id = %d", id, id)
	})
	time.Sleep(300 * time.Millisecond)
	tc.SetState(cf, model.ChangefeedPaused)
	hook.Arm()
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		_, err := c.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: cf, Tables: []string{"public.b"}, By: "test"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "the test refuses this write") {
		t.Fatalf("the update whose write failed answered %v", err)
	}
	if got := published(); got != "a,b" {
		t.Fatalf("after the update failed the publication publishes %s, want a,b", got)
	}
	if e := tc.Changefeed(cf); !strings.Contains(e.Info.SourceURI, "public.a") {
		t.Fatalf("after the update failed the changefeed's source is %s", e.Info.SourceURI)
	}
	tc.SetState(cf, model.ChangefeedNormal)
	time.Sleep(time.Second)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	// A table held stops the checkpoint: said as such, not as a
	// checkpoint that never came.
	end, deadline := model.TsFromTime(time.Now()), time.Now().Add(time.Minute)
	for e := tc.Changefeed(cf); e.Status.CheckpointTs <= end; e = tc.Changefeed(cf) {
		if len(e.Status.Tables) > 0 || time.Now().After(deadline) {
			t.Fatalf("after the failed update and the resume, the checkpoint is at %v and tables are reported: %+v", e.Status.CheckpointTs, e.Status.Tables)
		}
		time.Sleep(100 * time.Millisecond)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.a")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase(cf, up, []string{"public.a", "public.b"}, time.Now())
	if e := tc.Changefeed(cf); !rep.OK || len(e.Status.Tables) != 0 {
		t.Fatalf("after the failed update and the resume: %+v; tables reported %+v", rep, e.Status.Tables)
	}
	if !enginetest.FileSinkHolds(t, dir, false, `"n":"-7"`, "public", "a") {
		t.Fatal("the row written to a during the failed update is not in the sink")
	}

	// Made again, the update lands: a leaves the publication now.
	tc.UpdateTables(cf, "public.b")
	if got := published(); got != "b" {
		t.Fatalf("after the update landed the publication publishes %s, want b", got)
	}
	t.Logf("%+v", rep.TableReports)
}

// An update that removes a table dropped upstream tells the sink once,
// also when its write meets a status that moved and it is computed again
// (a paused changefeed's dispatchers still report where they stopped):
// each try read the database's clock for the DROP anew and wrote it
// again, at another version, and the sink held two DROP TABLE schema
// files (the tables runbook, now and then in CI). Here the test moves
// the status under the update's first write.
func TestAnUpdateComputedAgainTellsTheSinkOfADroppedTableOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	for _, table := range []string{"a", "gone"} {
		if _, err := srv.Psql(ctx, "shop", `CREATE TABLE `+table+` (id int8 PRIMARY KEY, n int4); INSERT INTO `+table+` SELECT g, 0 FROM generate_series(1, 100) g;`); err != nil {
			t.Fatal(err)
		}
	}
	dsn := srv.DSN("shop")
	const cf = "dropagain"
	var tc *enginetest.Cluster
	hook := enginetest.NewWriteHook(meta.NewKeys(enginetest.ClusterID).ChangefeedInfo(cf), nil, func(ctx context.Context, n int) {
		if n != 1 {
			return
		}
		if err := tc.RewriteStatus(ctx, cf); err != nil {
			t.Errorf("write the status again: %v", err)
		}
	})
	tc = enginetest.New(t, enginetest.Options{Interceptor: hook.Interceptor})
	tc.StartCaptures(2)
	dir := t.TempDir()
	tc.CreateChangefeed(cf, dsn+"&tables=public.a,public.gone&auto-remedy=false&catalog-interval=1s", "file://"+dir+"?flush-interval=100ms", 1)
	tc.WaitSnapshot(cf)
	if _, err := srv.Psql(ctx, "shop", `DROP TABLE gone`); err != nil {
		t.Fatal(err)
	}
	tc.Eventually("gone reported dropped", 60*time.Second, func() bool {
		for _, ti := range tc.Changefeed(cf).Status.Tables {
			if ti.Table == "public.gone" && ti.State == model.TableDropped {
				return true
			}
		}
		return false
	})
	tc.SetState(cf, model.ChangefeedPaused)
	hook.Arm()
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		_, err := c.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: cf, Tables: []string{"public.a"}, By: "test"})
		return err
	})
	if err != nil {
		t.Fatalf("the update: %v", err)
	}
	if n := hook.Met(); n < 2 {
		t.Fatalf("the update wrote %d times; want it computed again after the moved status", n)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "public", "gone", "meta", "schema_*.json"))
	drops := 0
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "DROP TABLE public.gone") {
			drops++
		}
	}
	if drops != 1 {
		t.Fatalf("the sink holds %d DROP TABLE schema files of public.gone (%v); want 1", drops, files)
	}
}
