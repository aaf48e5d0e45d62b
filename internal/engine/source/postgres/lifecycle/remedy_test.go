package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A table replicated by its whole rows (REPLICA IDENTITY FULL) whose
// primary key is replaced by one of other columns is held (its rows can
// no longer be told apart by the key they were replicated by) and then
// copied again by the changefeed itself under the new key, as the hold's
// reason told an operator to, also by a changefeed with table rules
// (which keeps them). Under a workload on it and a table beside it, it
// comes back without a table held, and the sink rebuilt equals the
// upstream's tables.
func TestATableWhoseKeyWasReplacedIsCopiedAgainByTheChangefeedItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startKAndBeside(t)
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	tc.CreateChangefeed("healed", dsn+"&tables=public.k,public.beside&chunk-rows=500", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.CreateChangefeed("ruled", dsn+"&tables=public.*", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	// Its only table: copied again in one update, its partitions
	// replaced (it could not be removed and added back).
	tc.CreateChangefeed("only", dsn+"&tables=public.k", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("healed")
	tc.WaitSnapshot("ruled")
	tc.WaitSnapshot("only")

	stop := updating(ctx, srv, "shop", updateKAndBeside)
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE k DROP CONSTRAINT k_pkey, ADD PRIMARY KEY (code)`); err != nil {
		t.Fatal(err)
	}
	for _, cf := range []model.ChangefeedID{"healed", "ruled", "only"} {
		tc.Eventually("k copied again by changefeed "+string(cf)+", no table held", 60*time.Second, func() bool {
			e := tc.Changefeed(cf)
			resumed := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
				return in.Kind == "resumed" && strings.Contains(in.Reason, "a held table's remedy")
			})
			return resumed && e.Status.State == model.ChangefeedNormal && len(e.Status.Tables) == 0
		})
		tc.WaitSnapshot(cf)
	}
	time.Sleep(300 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.k")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("healed", up, []string{"public.k", "public.beside"}, time.Now())
	if !rep.OK {
		t.Fatalf("after k was copied again under its new key: %+v", rep)
	}
	if ruled := tc.VerifyDatabase("ruled", up, []string{"public.k", "public.beside"}, time.Now()); !ruled.OK {
		t.Fatalf("the changefeed with table rules, after k was copied again: %+v", ruled)
	}
	if only := tc.VerifyDatabase("only", up, []string{"public.k"}, time.Now()); !only.OK || only.Duplicates != 0 {
		t.Fatalf("the changefeed of k alone, after k was copied again: %+v", only)
	}
	if e := tc.Changefeed("ruled"); !strings.Contains(e.Info.SourceURI, "filter=public.%2A") {
		t.Fatalf("the changefeed with table rules lost them: %s", e.Info.SourceURI)
	}
	t.Logf("%+v", rep.TableReports)
}

// A coordinator that stops in the middle of a held table's remedy (the
// changefeed paused, the table removed, not yet added back) leaves it
// written in the changefeed's status, and the next coordinator makes the
// rest and resumes the changefeed: before, the changefeed stayed paused,
// or went on without the table. Two changefeeds are left so, one with
// the table already removed, one only paused; the coordinator leading
// then is killed, and the one after it finishes both. Under a workload,
// the sinks rebuilt equal the upstream's tables.
func TestARemedyLeftHalfDoneByACoordinatorIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startKAndBeside(t)
	dsn := srv.DSN("shop")
	// Rounds an hour apart: the coordinator leading now does not apply
	// the remedy itself; the next one's first round, at its start, does.
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: time.Hour})
	tc.StartCaptures(2)
	cfs := []model.ChangefeedID{"half", "paused"}
	for _, cf := range cfs {
		tc.CreateChangefeed(string(cf), dsn+"&tables=public.k,public.beside&chunk-rows=500", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	}
	for _, cf := range cfs {
		tc.WaitSnapshot(cf)
	}
	stop := updating(ctx, srv, "shop", updateKAndBeside)
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE k DROP CONSTRAINT k_pkey, ADD PRIMARY KEY (code)`); err != nil {
		t.Fatal(err)
	}
	for _, cf := range cfs {
		tc.Eventually("k held, to be copied again, in "+string(cf), 60*time.Second, func() bool {
			return slices.ContainsFunc(tc.Changefeed(cf).Status.Tables, func(ti model.TableIssue) bool {
				return ti.Table == "public.k" && ti.State == model.TableHeld && ti.CopyAgain
			})
		})
	}
	steps := [][]string{{"public.beside"}, {"public.k", "public.beside"}}
	// "half": the remedy's first step made (k removed), then its
	// coordinator stopped; "paused": it stopped right after the pause.
	tc.SetState("half", model.ChangefeedPaused)
	tc.UpdatePaused("half", steps[0])
	tc.LeaveRefollow("half", model.Refollow{By: "a held table's remedy", Steps: steps, Done: 1, Since: time.Now()})
	tc.LeaveRefollow("paused", model.Refollow{By: "a held table's remedy", Steps: steps, Since: time.Now()})
	leader := tc.WaitLeader()
	tc.Crash(leader.Node)
	for _, cf := range cfs {
		tc.Eventually("k copied again in "+string(cf)+" by the next coordinator, resumed, no table held", 60*time.Second, func() bool {
			e := tc.Changefeed(cf)
			resumed := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
				return in.Kind == "resumed" && in.Reason == "by a held table's remedy"
			})
			return resumed && e.Status.State == model.ChangefeedNormal && e.Status.Refollow == nil && len(e.Status.Tables) == 0
		})
		tc.WaitSnapshot(cf)
	}
	time.Sleep(300 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.k")
	if err != nil {
		t.Fatal(err)
	}
	for _, cf := range cfs {
		if rep := tc.VerifyDatabase(cf, up, []string{"public.k", "public.beside"}, time.Now()); !rep.OK {
			t.Fatalf("%s, after the next coordinator finished the remedy: %+v", cf, rep)
		}
	}
}

// A table removed to be copied again that cannot be added back (here:
// renamed away meanwhile) keeps the changefeed paused, with the change's
// record, and each round tries again: resumed at once, the changefeed
// would go on without the table. Once the table can be added back, it
// is, and the changefeed resumes; the sink rebuilt equals the upstream.
func TestATableThatCannotBeAddedBackKeepsTheChangefeedPausedUntilItCan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE a (id int8 PRIMARY KEY, n int4);
INSERT INTO a SELECT g, 0 FROM generate_series(1, 2000) g;
CREATE TABLE b (id int8 PRIMARY KEY, n int4);
INSERT INTO b SELECT g, 0 FROM generate_series(1, 2000) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	tc.CreateChangefeed("cf", dsn+"&tables=public.a,public.b", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("cf")
	steps := [][]string{{"public.a"}, {"public.a", "public.b"}}
	tc.SetState("cf", model.ChangefeedPaused)
	tc.UpdatePaused("cf", steps[0])
	if _, err := srv.Psql(ctx, "shop", `UPDATE b SET n = 1 WHERE id <= 100; ALTER TABLE b RENAME TO b_away`); err != nil {
		t.Fatal(err)
	}
	tc.LeaveRefollow("cf", model.Refollow{By: "a held table's remedy", Steps: steps, Done: 1, Since: time.Now()})
	// Each round tries three times, a second apart: long enough for two
	// rounds to fail.
	time.Sleep(8 * time.Second)
	if e := tc.Changefeed("cf"); e.Status.State != model.ChangefeedPaused || e.Status.Refollow == nil || e.Status.Refollow.Done != 1 {
		t.Fatalf("the changefeed, its table not added back: %s, %+v", e.Status.State, e.Status.Refollow)
	}
	// An operator's pause would not keep it paused: refused, with why.
	err := tc.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		return coord.SetChangefeedState(ctx, term, "cf", model.ChangefeedPaused, "operator")
	})
	if err == nil || !strings.Contains(err.Error(), "paused by the coordinator while it changes its tables") {
		t.Fatalf("an operator's pause of a changefeed the coordinator has paused: %v", err)
	}
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE b_away RENAME TO b; UPDATE b SET n = 2 WHERE id > 1900; UPDATE a SET n = 3 WHERE id < 50`); err != nil {
		t.Fatal(err)
	}
	tc.Eventually("b added back, the changefeed resumed", 60*time.Second, func() bool {
		e := tc.Changefeed("cf")
		return e.Status.State == model.ChangefeedNormal && e.Status.Refollow == nil && strings.Contains(e.Info.SourceURI, "public.b")
	})
	tc.WaitSnapshot("cf")
	tc.WaitCheckpoint("cf", model.TsFromTimeMicros(time.Now()))
	up, err := postgres.NewTableReader(dsn + "&tables=public.a")
	if err != nil {
		t.Fatal(err)
	}
	if rep := tc.VerifyDatabase("cf", up, []string{"public.a", "public.b"}, time.Now()); !rep.OK {
		t.Fatalf("after b was added back: %+v", rep)
	}
}

// startKAndBeside starts a database shop with tables k (replicated by
// its whole rows, keyed by id, code another unique column) and beside.
func startKAndBeside(t *testing.T) *pgserver.Server {
	t.Helper()
	srv := pgtest.StartDB(t, "shop")
	n := strconv.Itoa(retypedRows)
	if _, err := srv.Psql(context.Background(), "shop", `
CREATE TABLE k (id int8 PRIMARY KEY, code int8 NOT NULL, n int4); ALTER TABLE k REPLICA IDENTITY FULL;
INSERT INTO k SELECT g, 100000 - g, 0 FROM generate_series(1, `+n+`) g;
CREATE TABLE beside (id int8 PRIMARY KEY, n int4);
INSERT INTO beside SELECT g, 0 FROM generate_series(1, `+n+`) g;`); err != nil {
		t.Fatal(err)
	}
	return srv
}

// updateKAndBeside is the i-th statement of the workload on tables k and
// beside: a row of each updated, the rows in turn.
func updateKAndBeside(i int) string {
	id := 1 + i%retypedRows
	return fmt.Sprintf("UPDATE k SET n = n + 1 WHERE id = %d; UPDATE beside SET n = n + 1 WHERE id = %d", id, id)
}

// updating runs stmt(0), stmt(1), ... against database db until the
// returned stop is called, which answers the first error.
func updating(ctx context.Context, srv *pgserver.Server, db string, stmt func(i int) string) (stop func() error) {
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			if _, err := srv.Psql(ctx, db, stmt(i)); err != nil {
				done <- err
				return
			}
		}
	}()
	return func() error { close(quit); return <-done }
}
