package changefeeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed whose binary log was purged while it was paused fails on
// resume, saying so and what to do, and goes on from nowhere else; it is
// never re-snapshotted by itself. The operator's re-snapshot (a dry run
// first, which writes nothing) leaves it paused with its error cleared
// and its partitions replaced over the same ranges; resumed under the
// same live workload, it copies the tables again, and the sink rebuilt
// equals MariaDB's tables, although rows the sink held were deleted
// while the binary log was lost (the TRUNCATE before the copy drops
// them), with nothing written twice.
func TestAPurgedBinaryLogFailsTheChangefeedUntilItIsResnapshotted(t *testing.T) {
	t.Parallel()
	const existing = 600
	tc, db := startShopOf(t, existing, 40)
	w := startShopWorkload(t, db, existing)
	tc.WaitSnapshot("my")
	tc.WaitCheckpoint("my", model.TsFromTimeMicros(time.Now()))
	tc.SetState("my", model.ChangefeedPaused)
	time.Sleep(2 * time.Second) // its reader stops
	paused := tc.Changefeed("my").Status.CheckpointTs

	// While paused: the workload goes on, and items the sink holds are
	// deleted; then the binary logs holding all that are purged.
	// (The workload's writes can make InnoDB pick it as a deadlock's
	// victim: it is run again, as an application would.)
	for try := 1; ; try++ {
		_, err := db.Exec("DELETE FROM items WHERE line <= 20")
		if err == nil {
			break
		}
		if !retryable(err) || try == 10 {
			t.Fatal(err)
		}
	}
	failed := purgeAndResume(t, tc, db)
	for _, want := range []string{"purged", "cannot go on from its checkpoint without losing changes", "cdcctl changefeed resnapshot NAME", "or remove it"} {
		if !strings.Contains(failed.Status.Error, want) {
			t.Fatalf("the failed changefeed's error %q does not say %q", failed.Status.Error, want)
		}
	}
	time.Sleep(2 * time.Second)
	if cp := tc.Changefeed("my").Status.CheckpointTs; cp != paused || tc.Changefeed("my").Status.State != model.ChangefeedFailed {
		t.Fatalf("the failed changefeed moved from %s to %s (%s): it went on from elsewhere, or by itself", paused, cp, tc.Changefeed("my").Status.State)
	}

	before := tc.State().SortedPartitions("my")
	resnapshot := func(dry bool) coordinator.UpdateResult {
		t.Helper()
		var res coordinator.UpdateResult
		if err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
			var err error
			res, err = c.ResnapshotChangefeed(ctx, term, coordinator.ResnapshotRequest{ID: "my", DryRun: dry, By: "test"})
			return err
		}); err != nil {
			t.Fatalf("re-snapshot (dry run %v): %v", dry, err)
		}
		return res
	}
	dry := resnapshot(true)
	if !slices.Equal(dry.Added, []string{"shop.orders", "shop.items"}) || len(dry.AddedSpans) != len(before) || len(dry.RemovedPartitions) != len(before) || dry.At != paused {
		t.Fatalf("the dry run: %+v (partitions before: %d, checkpoint %s)", dry, len(before), paused)
	}
	if st := tc.Changefeed("my").Status; st.State != model.ChangefeedFailed || st.Error == "" {
		t.Fatalf("a dry run changed the changefeed: %+v", st)
	}
	res := resnapshot(false)
	st := tc.Changefeed("my").Status
	if st.State != model.ChangefeedPaused || st.Error != "" || st.Incidents[len(st.Incidents)-1].Kind != coordinator.IncidentResnapshot ||
		!strings.Contains(st.Incidents[len(st.Incidents)-1].Reason, "purged") {
		t.Fatalf("after the re-snapshot: %+v", st)
	}
	after := tc.State().SortedPartitions("my")
	if len(after) != len(before) || len(res.AddedPartitions) != len(before) {
		t.Fatalf("%d partitions before, %d after (%v)", len(before), len(after), res.AddedPartitions)
	}
	for i, r := range after {
		if r.Route.ID == before[i].Route.ID || r.Route.Span.String() != before[i].Route.Span.String() || r.Route.Since != paused {
			t.Fatalf("partition %s (%s, since %s) replaces %s (%s): want a new id over the same range from %s", r.Route.ID, r.Route.Span, r.Route.Since, before[i].Route.ID, before[i].Route.Span, paused)
		}
	}
	// Refused again while it runs.
	tc.SetState("my", model.ChangefeedNormal)
	if err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		_, err := c.ResnapshotChangefeed(ctx, term, coordinator.ResnapshotRequest{ID: "my", By: "test"})
		return err
	}); !errors.Is(err, coordinator.ErrNotPaused) {
		t.Fatalf("a re-snapshot of a running changefeed: %v", err)
	}

	tc.WaitSnapshot("my")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders", "shop.items"}, w.finish(t))
	if !rep.OK || rep.Duplicates != 0 || w.n < 20 {
		root := strings.TrimPrefix(strings.SplitN(tc.Changefeed("my").Info.SinkURI, "?", 2)[0], "file://")
		files, _ := filepath.Glob(filepath.Join(root, "shop", "*", "meta", "schema_*.json"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			t.Logf("%s: %s", filepath.Base(f), strings.Join(strings.Fields(string(b)), " "))
		}
		t.Fatalf("after %d transactions, a purge and a re-snapshot: %+v", w.n, rep)
	}
	t.Logf("%d transactions; failed with: %s; re-snapshotted at %s into %v; %+v", w.n, failed.Status.Error, res.At, res.AddedPartitions, rep.TableReports)
}

// purgeAndResume purges the binary logs that changefeed "my", paused,
// would resume from, and resumes it: refused, and failed at once.
func purgeAndResume(t *testing.T, tc *enginetest.Cluster, db *sql.DB) *meta.ChangefeedEntry {
	t.Helper()
	mysqltest.PurgeBinaryLogs(t, db)
	// The resume is refused, saying why, and the changefeed failed at
	// once: the server was asked before anything resumed.
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		return c.SetChangefeedState(ctx, term, "my", model.ChangefeedNormal, "test")
	})
	if !errors.Is(err, coordinator.ErrUnresumable) || !strings.Contains(err.Error(), "changefeed my cannot resume, and is failed: the binary log the changefeed resumes from was purged") {
		t.Fatalf("the resume of a changefeed whose binary log was purged: %v", err)
	}
	e := tc.Changefeed("my")
	if last := e.Status.Incidents[len(e.Status.Incidents)-1]; e.Status.State != model.ChangefeedFailed || last.Kind != "failed" || !strings.Contains(last.Reason, "purged") {
		t.Fatalf("after the refused resume: %+v", e.Status)
	}
	return e
}

// A key moved to another column of the same type (x to y, both INT)
// while the changefeed was stopped and its binary log purged: the
// re-snapshot's partitions copy under the key the catalog has now. They
// kept the old key's columns, and every chunk, read under (y), was
// refused as a key changed while copying: the snapshot never ended. A
// key moved to a column of another type (x INT to s VARCHAR) cuts its
// table anew, its ranges' bounds being keys of the old encoding. Under a
// live workload the sink rebuilt equals the tables.
func TestAResnapshotCopiesUnderTheKeyTheTableHasNow(t *testing.T) {
	t.Parallel()
	const existing = 400
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE keyed (x INT NOT NULL, y INT NOT NULL, v VARCHAR(16), PRIMARY KEY (x), UNIQUE KEY (y))")
	var rows []string
	for i := 1; i <= existing; i++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, 'v%d')", i, -i, i))
	}
	mysqltest.Exec(t, db, "INSERT INTO keyed VALUES "+strings.Join(rows, ", "),
		"CREATE TABLE retyped (x INT NOT NULL PRIMARY KEY, s VARCHAR(8) NOT NULL, UNIQUE KEY (s))",
		"INSERT INTO retyped SELECT x, CONCAT('s', 1000 - x) FROM keyed")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=keyed,retyped&chunk-rows=50", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewSource(time.Now().UnixNano()))
		next := existing + 1
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var err error
			switch id := 1 + rng.Intn(next-1); rng.Intn(4) {
			case 0, 1:
				_, err = db.Exec("INSERT INTO keyed VALUES (?, ?, ?)", next, -next, fmt.Sprintf("n%d", next))
				next++
			case 2:
				_, err = db.Exec("UPDATE keyed SET v = ? WHERE x = ?", fmt.Sprintf("u%d", rng.Intn(1000)), id)
			default:
				_, err = db.Exec("DELETE FROM keyed WHERE x = ?", id)
			}
			if err != nil {
				done <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	finish := func() time.Time {
		t.Helper()
		close(stop)
		if err := <-done; err != nil {
			t.Fatalf("workload: %v", err)
		}
		return time.Now()
	}
	tc.WaitSnapshot("my")
	tc.SetState("my", model.ChangefeedPaused)
	time.Sleep(2 * time.Second) // its reader stops
	mysqltest.Exec(t, db, "ALTER TABLE keyed DROP PRIMARY KEY, ADD PRIMARY KEY (y)", "ALTER TABLE retyped DROP PRIMARY KEY, ADD PRIMARY KEY (s)")
	purgeAndResume(t, tc, db)
	var res coordinator.UpdateResult
	if err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		var err error
		res, err = c.ResnapshotChangefeed(ctx, term, coordinator.ResnapshotRequest{ID: "my", By: "test"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	parts := tc.State().SortedPartitions("my")
	for _, r := range parts {
		want := map[string]string{"shop.keyed": "(y)", "shop.retyped": "(s)"}[r.Route.Span.Table]
		if sp := r.Route.Span; sp.KeyColumns != want || (want == "(y)") != (sp.Key == "int8") {
			t.Fatalf("re-snapshotted partition %s (%v) copies under key %s %s, want %s", r.Route.ID, res.AddedPartitions, sp.Key, sp.KeyColumns, want)
		}
	}
	if len(parts) != 4 {
		t.Fatalf("%d partitions after the re-snapshot, want 2 per table", len(parts))
	}
	if want := []coordinator.Rekeyed{{Table: "shop.keyed", From: "(x)", To: "(y)"}, {Table: "shop.retyped", From: "(x)", To: "(s)", Recut: true}}; !slices.Equal(res.Rekeyed, want) {
		t.Fatalf("the re-snapshot tells of the changed keys %+v, want %+v", res.Rekeyed, want)
	}
	tc.SetState("my", model.ChangefeedNormal)
	tc.WaitSnapshot("my")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep := tc.VerifyDatabase("my", up, []string{"shop.keyed", "shop.retyped"}, finish()); !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after a key moved from x to y and a re-snapshot: %+v", rep)
	}
}
