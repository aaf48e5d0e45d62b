package changefeeds

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A PostgreSQL changefeed copies the existing rows and replicates a live
// workload of inserts, updates, deletes, key changes and rollbacks
// through a split at an integer key, a move of the upper half, a drain of
// the capture running its reader, and a kill -9 of the capture the reader
// moved to; the tables rebuilt from the sink then equal the upstream's.
func TestAChangefeedGoesThroughASplitAMoveADrainAndAReaderCrash(t *testing.T) {
	t.Parallel()
	srv, dsn := startShop(t)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	created := tc.CreateChangefeed("pg", dsn+"&tables=public.orders,public.items,public.events", sink, 0)
	if e := tc.Changefeed("pg"); len(e.Status.SourcePosition) == 0 {
		t.Fatalf("no source position: %+v", e.Status)
	}
	// Each table is cut at the quantiles of its keys: orders (ids 1 to
	// 6,000) at 1501, 3001 and 4501, in numeric order.
	var bounds []string
	for _, r := range tc.State().Partitions["pg"] {
		if start, _ := r.Route.Span.Bounds(); r.Route.Span.Table == "public.orders" && start != "" {
			bounds = append(bounds, start)
		}
	}
	slices.Sort(bounds)
	if strings.Join(bounds, " ") != "1501 3001 4501" {
		t.Fatalf("orders cut at %v, want the quantiles 1501 3001 4501", bounds)
	}
	w := startFullWorkload(t, dsn)
	// The existing rows are copied while the workload runs.
	tc.WaitSnapshot("pg")
	tc.WaitCheckpoint("pg", created.StartTs+model.TsFromMillis(1500))

	// Split the orders table at integer key 3000 (keys compare as
	// numbers: 10000 is above it), then move the upper half to another
	// capture.
	orders := tc.PartitionFrom("pg", "public.orders", "1501") // [1501, 3001)
	snap := tc.State().Snapshot()
	events := tc.PartitionFrom("pg", "public.events", "")
	if _, err := plan.Split(&snap, events.ID, "x", plan.DefaultCosts); err == nil || !strings.Contains(err.Error(), "has no primary key, so it is one partition that cannot be split") {
		t.Fatalf("a split of the keyless table: %v", err)
	}
	if _, err := plan.Split(&snap, orders.ID, "three thousand", plan.DefaultCosts); err == nil || !strings.Contains(err.Error(), `key "three thousand" does not parse for the key columns (int8)`) {
		t.Fatalf("a key that is not an integer: %v", err)
	}
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) {
		return plan.Split(s, orders.ID, "3000", plan.DefaultCosts)
	})
	if lower, ok := tc.State().Partitions["pg"][orders.ID]; !ok {
		t.Fatalf("the lower half %s is gone", orders.ID)
	} else if s, e := lower.Route.Span.Bounds(); s != "1501" || e != "3000" {
		t.Fatalf("the lower half shows [%q, %q), want [1501, 3000)", s, e)
	}
	upper := tc.PartitionFrom("pg", "public.orders", "3000")
	if _, end := upper.Span.Bounds(); upper.ID == "" || end != "3001" {
		t.Fatalf("no upper half [3000, 3001) of %s: %+v", orders.ID, upper)
	}
	tc.MoveElsewhere(upper.ID)
	// Schema changes under the workload, each through the DDL barrier of
	// all the table's partitions: an added column (orders is cut in five
	// now), a column renamed (the rows copied before keep their values
	// under its new name), and a TRUNCATE, the rows before it gone.
	if _, err := srv.Psql(ctx, "shop", "ALTER TABLE orders ADD COLUMN extra int4 DEFAULT 7"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", "ALTER TABLE orders RENAME COLUMN region TO area"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", "TRUNCATE items"); err != nil {
		t.Fatal(err)
	}
	tc.WaitCheckpoint("pg", model.TsFromTimeMicros(time.Now()))

	// Drain the capture running the reader: the maintainer, and with it
	// the reader, moves; the reader resumes from the checkpoint.
	reader := tc.MaintainerOf("pg")
	tc.NotCoordinator(reader)
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Drain(s, reader, 2, plan.DefaultCosts) })
	moved := tc.MaintainerOf("pg")
	if moved == reader {
		t.Fatalf("the maintainer is still on the drained %s", reader)
	}

	// So far everything was graceful: under the running workload the
	// tables rebuilt from the sink equal the upstream's, nothing twice.
	if rep := verifyShop(t, tc, dsn, shopTables, time.Now()); !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after a move and a drain, under load: %+v", rep)
	}

	// Kill the capture the reader moved to; the last capture runs
	// everything, the reader taking the slot over.
	tc.Crash(moved)
	tc.WaitCheckpoint("pg", model.TsFromTimeMicros(time.Now()))

	end := w.finishAfter(t, 50)
	if w.n < 50 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	rep := verifyShop(t, tc, dsn, shopTables, end)
	if !rep.OK || rep.Keys == 0 {
		t.Fatalf("after %d transactions: %+v", w.n, rep)
	}
	t.Logf("%d transactions, %d changes applied, %d rows compared: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	// (One table shows it, items the smallest: emptied by the TRUNCATE,
	// then filled by the workload.)
	if early := rebuiltEarly(t, tc, dsn, []string{"public.items"}); early.OK || early.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the sink matches the final upstream: %+v", early)
	}

	// Removing the changefeed releases the slot and the publication.
	tc.RemoveChangefeed("pg")
	out, err := srv.Psql(ctx, "shop", "SELECT count(*) FROM pg_replication_slots; SELECT count(*) FROM pg_publication")
	if err != nil || out != "0\n0\n" {
		t.Fatalf("after removal: %q %v", out, err)
	}
}

// PostgreSQL goes down under a changefeed: the changefeed says why it
// does not advance and retries; when PostgreSQL is back it catches up by
// itself. Then a pause (the slot idle, retaining WAL) and a resume.
// Nothing is lost.
func TestAnOutageIsRetriedAndLosesNothing(t *testing.T) {
	t.Parallel()
	srv, dsn := startShop(t)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	created := tc.CreateChangefeed("pg", dsn+"&tables=orders,items", sink, 0)
	// The URI as created: it names the changefeed's slot.
	source := created.SourceURI
	w := startWorkload(t, dsn)
	w.tolerant = true
	tc.WaitCheckpoint("pg", created.StartTs+model.TsFromMillis(1000))
	tc.WaitSnapshot("pg")

	// PostgreSQL's shutdown waits for its walsenders' clients to confirm
	// everything sent: the reader confirms resolved positions too, so a
	// fast shutdown is not held up by it (pg_ctl gives up after a minute,
	// failing the test).
	stopping := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped in %s", time.Since(stopping).Round(time.Millisecond))
	var why string
	tc.Eventually("the changefeed to say the source is unavailable", 30*time.Second, func() bool {
		why = tc.Changefeed("pg").Status.Error
		return strings.Contains(why, "source unavailable, retrying")
	})
	if _, err := sources.Inspect(ctx, source, tc.Changefeed("pg").Status.SourcePosition); err == nil {
		t.Fatal("with PostgreSQL down, the slot's status should say it cannot be read")
	}
	if s := tc.CopySummary("pg"); !strings.HasPrefix(s, "done") {
		t.Fatalf("with PostgreSQL down, the snapshot should still show as done: %q", s)
	}
	t.Logf("while PostgreSQL was down: %s", why)
	if err := srv.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	tc.WaitCheckpoint("pg", model.TsFromTimeMicros(time.Now()))
	if e := tc.Changefeed("pg"); e.Status.Error != "" {
		t.Fatalf("the error stays after recovery: %q", e.Status.Error)
	}

	// Pause: the reader lets go of the slot, which keeps what the sink
	// has not got; resume: it goes on from the checkpoint.
	tc.SetState("pg", model.ChangefeedPaused)
	tc.Eventually("the paused changefeed's slot to be idle", 30*time.Second, func() bool {
		ss, err := sources.Inspect(ctx, source, nil)
		return err == nil && ss != nil && ss.Slot != "" && !ss.Active
	})
	time.Sleep(time.Second) // the workload writes while paused
	tc.SetState("pg", model.ChangefeedNormal)
	tc.WaitCheckpoint("pg", model.TsFromTimeMicros(time.Now()))
	rep := verifyShop(t, tc, dsn, []string{"public.orders", "public.items"}, w.finish(t))
	if !rep.OK || rep.Keys == 0 {
		t.Fatalf("after the outage: %+v", rep)
	}
}
