package lifecycle

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A table dropped upstream, of a changefeed that names its tables one by
// one, is ended by the changefeed itself once every change before the
// drop is written: removed from its tables, the sink told DROP TABLE, as
// table rules end one. One dropped and created again under its name by
// then is copied in its place. Before, both stayed reported, their
// partitions idle, until an operator removed them, and the sink never
// learnt of the drop. Under a workload on all three tables, across the
// drops: the changefeed comes to replicate the kept table and the new
// one alone, with no table reported, the sink holds the DROP TABLE of
// the one gone, and the sink rebuilt equals the upstream's tables with no
// change written twice. A changefeed whose only table is dropped keeps it
// reported (a changefeed needs a table).
func TestATableDroppedUpstreamIsEndedByTheChangefeedItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	for _, table := range []string{"keep", "gone", "back", "solo"} {
		if _, err := srv.Psql(ctx, "shop", `CREATE TABLE `+table+` (id int8 PRIMARY KEY, n int4);
INSERT INTO `+table+` SELECT g, 0 FROM generate_series(1, `+n+`) g;`); err != nil {
			t.Fatal(err)
		}
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	dir := t.TempDir()
	tc.CreateChangefeed("dropped", dsn+"&tables=public.keep,public.gone,public.back&chunk-rows=500&catalog-interval=1s", "file://"+dir+"?flush-interval=100ms", 2)
	tc.CreateChangefeed("solo", dsn+"&tables=public.solo&catalog-interval=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("dropped")
	tc.WaitSnapshot("solo")

	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- recreateWorkload(ctx, dsn, stop, "keep", "gone", "back") }()
	time.Sleep(300 * time.Millisecond)
	// The last change before the drop, in its transaction, must reach
	// the sink: nothing else writes n = -1.
	if _, err := srv.Psql(ctx, "shop", `INSERT INTO gone VALUES (0, -1); DROP TABLE gone; DROP TABLE solo; DROP TABLE back;
CREATE TABLE back (id int8 PRIMARY KEY, n int4);
INSERT INTO back SELECT g, 7 FROM generate_series(1, `+n+`, 3) g;`); err != nil {
		t.Fatal(err)
	}
	tc.Eventually("the changefeed replicates public.keep and the new public.back alone", 120*time.Second, func() bool {
		e := tc.Changefeed("dropped")
		return e != nil && e.Status.State == model.ChangefeedNormal && len(e.Status.Tables) == 0 &&
			strings.Contains(e.Info.SourceURI, "public.back") && !strings.Contains(e.Info.SourceURI, "public.gone")
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.keep")
	if err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("dropped")
	rep := tc.VerifyDatabase("dropped", up, []string{"public.keep", "public.back"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the drops were followed: %+v", rep)
	}
	if !enginetest.FileSinkHolds(t, dir, true, "DROP TABLE public.gone", "public", "gone") {
		t.Fatal("the sink has no DROP TABLE of public.gone among its schema files")
	}
	if !enginetest.FileSinkHolds(t, dir, false, `"n":"-1"`, "public", "gone") {
		t.Fatal("the last change of public.gone before its drop is not in the sink")
	}
	tc.Eventually("the changefeed whose only table was dropped reports it", 30*time.Second, func() bool {
		return len(tc.Changefeed("solo").Status.Tables) == 1
	})
	time.Sleep(time.Second) // a round of the coordinator, which must not remove it
	solo := tc.Changefeed("solo")
	paused := slices.ContainsFunc(solo.Status.Incidents, func(in model.Incident) bool { return in.Kind == "paused" && in.Reason != "by test" })
	if solo.Status.State != model.ChangefeedNormal || len(solo.Status.Tables) != 1 || solo.Status.Tables[0].State != model.TableDropped ||
		!strings.Contains(solo.Info.SourceURI+"&", "tables=public.solo&") || paused {
		t.Fatalf("the changefeed whose only table was dropped (never paused to remove it): %s, %s, %+v, incidents %+v", solo.Status.State, solo.Info.SourceURI, solo.Status.Tables, solo.Status.Incidents)
	}
	t.Logf("%+v", rep.TableReports)
}
