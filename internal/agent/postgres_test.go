package agent

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// startPostgres starts a private PostgreSQL with database shop holding
// the tables the workload writes.
func startPostgres(t *testing.T) (*pgserver.Server, string) {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, filepath.Join(t.TempDir(), "pg"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if _, err := srv.Psql(ctx, "postgres", "CREATE DATABASE shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE orders (id int8 PRIMARY KEY, region text NOT NULL, amount numeric(10,2), note text, paid bool, at timestamptz);
CREATE TABLE items (sku text, line int4, qty int4 NOT NULL, tags text[], PRIMARY KEY (sku, line));
-- No primary key, and equal rows: one partition, rows told apart by
-- their whole image.
CREATE TABLE events (kind text, payload text, n int4);
ALTER TABLE events REPLICA IDENTITY FULL;
INSERT INTO events SELECT (ARRAY['a','b'])[g % 2 + 1], 'p' || (g % 100), 0 FROM generate_series(1, 2000) g;
-- Rows that exist before any changefeed: the initial snapshot copies them.
INSERT INTO orders SELECT g, (ARRAY['eu','us','ap'])[g % 3 + 1], g / 10.0, NULL, g % 2 = 0, now() FROM generate_series(1, 6000) g;
INSERT INTO items SELECT 'sku-' || (g % 50), g, g % 9 + 1, ARRAY['a', 'b c'] FROM generate_series(1, 6000) g;`); err != nil {
		t.Fatal(err)
	}
	return srv, srv.DSN("shop")
}

// workload writes transactions of inserts, updates, deletes and key
// changes into shop until stopped, rolling some back.
type workload struct {
	dsn string
	// tolerant: connection errors (an outage) are waited out, not fatal.
	tolerant bool
	stop     chan struct{}
	done     chan struct{}
	err      error
	n        int   // committed transactions
	next     int64 // the next order id
	events   bool  // also change the keyless events table
}

func startWorkload(t *testing.T, dsn string) *workload {
	w := &workload{dsn: dsn, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *workload) run() {
	defer close(w.done)
	for {
		err := w.session()
		select {
		case <-w.stop:
			return
		default:
		}
		if err == nil || !w.tolerant {
			w.err = err
			return
		}
		time.Sleep(100 * time.Millisecond) // PostgreSQL is down: try again
	}
}

// session runs transactions on one connection until stopped or an error.
func (w *workload) session() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) + 1 FROM orders`).Scan(&w.next); err != nil {
		return err
	}
	// Order ids committed and not deleted: the rows already there too, so
	// that the workload changes rows the snapshot is copying.
	rows, err := conn.Query(ctx, `SELECT id FROM orders`)
	if err != nil {
		return err
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for {
		select {
		case <-w.stop:
			return nil
		default:
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		added, removed := []int64{}, map[int64]bool{}
		for range 1 + rng.Intn(5) {
			switch op := rng.Intn(10); {
			case op < 4 || len(live) < 5:
				id := w.next
				w.next++
				_, err = tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2, $3, $4, $5, now())`, id, []string{"eu", "us", "ap"}[id%3], fmt.Sprintf("%d.%02d", rng.Intn(1000), rng.Intn(100)), nil, id%2 == 0)
				added = append(added, id)
				if err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO items VALUES ($1, $2, $3, $4)`, fmt.Sprintf("sku-%d", id%50), id, rng.Intn(9)+1, []string{"a", "b c"})
				}
			case op < 7:
				id := live[rng.Intn(len(live))]
				_, err = tx.Exec(ctx, `UPDATE orders SET amount = amount + 1, note = $2 WHERE id = $1`, id, fmt.Sprintf("n%d", rng.Intn(100)))
				if err == nil {
					_, err = tx.Exec(ctx, `UPDATE items SET qty = qty + 1 WHERE line = $1`, id)
				}
			case op < 9:
				id := live[rng.Intn(len(live))]
				if !removed[id] {
					_, err = tx.Exec(ctx, `DELETE FROM orders WHERE id = $1`, id)
					removed[id] = true
				}
			default:
				// A key change: the row moves to a new id.
				id := live[rng.Intn(len(live))]
				if !removed[id] {
					nid := w.next
					w.next++
					_, err = tx.Exec(ctx, `UPDATE orders SET id = $2 WHERE id = $1`, id, nid)
					removed[id] = true
					added = append(added, nid)
				}
			}
			if err == nil && w.events {
				err = w.eventsChange(ctx, tx, rng)
			}
			if err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
		}
		if rng.Intn(8) == 0 {
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		w.n++
		kept := live[:0]
		for _, id := range live {
			if !removed[id] {
				kept = append(kept, id)
			}
		}
		live = append(kept, added...)
		time.Sleep(time.Duration(2+rng.Intn(4)) * time.Millisecond)
	}
}

// eventsChange inserts, updates or deletes one row of the keyless events
// table, often one of several equal rows.
func (w *workload) eventsChange(ctx context.Context, tx pgx.Tx, rng *rand.Rand) error {
	payload := fmt.Sprintf("p%d", rng.Intn(100))
	var err error
	switch rng.Intn(3) {
	case 0:
		_, err = tx.Exec(ctx, `INSERT INTO events VALUES ($1, $2, 0)`, []string{"a", "b"}[rng.Intn(2)], payload)
	case 1:
		_, err = tx.Exec(ctx, `UPDATE events SET n = n + 1 WHERE ctid = (SELECT ctid FROM events WHERE payload = $1 LIMIT 1)`, payload)
	default:
		_, err = tx.Exec(ctx, `DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE payload = $1 LIMIT 1)`, payload)
	}
	return err
}

// startFullWorkload starts the workload on every table, the keyless
// events too; the test's end finishes it if the test did not.
func startFullWorkload(t *testing.T, dsn string) *workload {
	w := &workload{dsn: dsn, events: true, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			w.finish(t)
		}
	})
	return w
}

// waitSnapshot waits until changefeed get says the initial snapshot is
// done.
func (tc *testCluster) waitSnapshot(c *api.Client, cf string) {
	tc.t.Helper()
	tc.eventually("the initial snapshot to finish", 60*time.Second, func() bool {
		got, err := c.Changefeed(context.Background(), cf)
		return err == nil && got.SourceStatus != nil && strings.HasPrefix(got.SourceStatus.Snapshot, "done")
	})
}

// finish stops the workload and returns when its last transaction ended.
func (w *workload) finish(t *testing.T) time.Time {
	t.Helper()
	close(w.stop)
	<-w.done
	if w.err != nil {
		t.Fatalf("workload: %v", w.err)
	}
	return time.Now()
}

// A PostgreSQL changefeed copies the existing rows and replicates a live
// workload of inserts, updates, deletes, key changes and rollbacks
// through a split at an integer key, a move of the upper half, a drain of
// the capture running its reader, and a kill -9 of the capture the reader
// moved to; the tables rebuilt from the sink then equal the upstream's.
func TestPostgresChangefeedThroughAMoveADrainAndAReaderCrash(t *testing.T) {
	t.Parallel()
	srv, dsn := startPostgres(t)
	tc := newTestCluster(t)
	tc.startCaptures(3)
	c := tc.clientWithTimeout(time.Minute)
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	source := dsn + "&tables=public.orders,public.items,public.events"
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "pg", Source: source, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if st := tc.state(); len(st.Changefeeds["pg"].Status.SourcePosition) == 0 {
		t.Fatalf("no source position: %+v", st.Changefeeds["pg"].Status)
	}
	// Each table is cut at the quantiles of its keys: orders (ids 1 to
	// 6,000) at 1501, 3001 and 4501, in numeric order.
	parts, err := c.Partitions(ctx, "pg", "")
	if err != nil {
		t.Fatal(err)
	}
	var bounds []string
	for _, p := range parts.Partitions {
		if p.Table == "public.orders" && p.Start != "" {
			bounds = append(bounds, p.Start)
		}
	}
	sort.Strings(bounds)
	if strings.Join(bounds, " ") != "1501 3001 4501" {
		t.Fatalf("orders cut at %v, want the quantiles 1501 3001 4501", bounds)
	}
	w := startFullWorkload(t, dsn)
	// The existing rows are copied while the workload runs; changefeed
	// get says when that is done.
	tc.waitSnapshot(c, "pg")
	tc.waitCheckpoint(c, "pg", model.Ts(created.StartTs)+model.TsFromMillis(1500))

	// Split the orders table at integer key 3000 (keys compare as
	// numbers: 10000 is above it), then move the upper half to another
	// capture.
	orders := tc.partitionFrom("pg", "public.orders", "1501") // [1501, 3001)
	for _, r := range tc.state().Partitions["pg"] {
		if r.Route.Span.Table == "public.events" {
			if _, err := plan.Split(tc.snapshot(c), r.Route.ID, "x", plan.DefaultCosts); err == nil || !strings.Contains(err.Error(), "has no primary key, so it is one partition that cannot be split") {
				t.Fatalf("a split of the keyless table: %v", err)
			}
		}
	}
	if _, err := plan.Split(tc.snapshot(c), orders.ID, "three thousand", plan.DefaultCosts); err == nil || !strings.Contains(err.Error(), `key "three thousand" does not parse for the key columns (int8)`) {
		t.Fatalf("a key that is not an integer: %v", err)
	}
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) {
		return plan.Split(s, orders.ID, "3000", plan.DefaultCosts)
	})
	if parts, err = c.Partitions(ctx, "pg", ""); err != nil {
		t.Fatal(err)
	}
	var upper api.Partition
	for _, p := range parts.Partitions {
		if p.Table == "public.orders" && p.Start == "3000" {
			upper = p
		}
		if p.ID == orders.ID && (p.Start != "1501" || p.End != "3000") {
			t.Fatalf("the lower half shows [%q, %q), want [1501, 3000)", p.Start, p.End)
		}
	}
	if upper.ID == "" || upper.End != "3001" {
		t.Fatalf("no upper half [3000, 3001) of %s in %+v", orders.ID, parts.Partitions)
	}
	to := tc.followerOf(model.NodeID(upper.Node))
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, upper.ID, to, plan.DefaultCosts) })
	// Schema changes under the workload, each through the DDL barrier of
	// all the table's partitions: an added column (orders is cut in five
	// now), and a TRUNCATE, the rows before it gone.
	if _, err := srv.Psql(ctx, "shop", "ALTER TABLE orders ADD COLUMN extra int4 DEFAULT 7"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "shop", "TRUNCATE items"); err != nil {
		t.Fatal(err)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(time.Now()))

	// Drain the capture running the reader: the maintainer, and with it
	// the reader, moves; the reader resumes from the checkpoint.
	reader := tc.state().Changefeeds["pg"].Maintainer.Node
	tc.notCoordinator(c, reader)
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Drain(s, reader, 2, plan.DefaultCosts) })
	moved := tc.state().Changefeeds["pg"].Maintainer.Node
	if moved == reader {
		t.Fatalf("the maintainer is still on the drained %s", reader)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(time.Now()))

	// So far everything was graceful: under the running workload the
	// tables rebuilt from the sink equal the upstream's, nothing twice.
	up, err := postgres.NewTableReader(dsn + "&tables=public.orders")
	if err != nil {
		t.Fatal(err)
	}
	tables := []string{"public.orders", "public.items", "public.events"}
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return tc.waitCheckpoint(c, "pg", ts), nil }
	if rep, err := verify.Database(ctx, sink, up, tables, wait); err != nil || !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after a move and a drain, under load: %+v %v", rep, err)
	}

	// Kill the capture the reader moved to; after its session expires
	// the last capture runs everything, the reader taking the slot over.
	tc.crash(moved)
	c = tc.clientWithTimeout(time.Minute)
	tc.waitCheckpoint(c, "pg", model.TsFromTime(time.Now()))

	end := w.finish(t)
	if w.n < 50 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(end.Add(100*time.Millisecond)))
	rep, err := verify.Database(ctx, sink, up, tables, wait)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Keys == 0 {
		t.Fatalf("after %d transactions: %+v", w.n, rep)
	}
	t.Logf("%d transactions, %d changes applied, %d rows compared: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	// Compared with the sink rebuilt one second in, the final tables
	// differ: it is a check that can fail.
	early, err := verify.Database(ctx, sink, atPosition{up, model.Ts(created.StartTs).Time().Add(time.Second)}, tables, wait)
	if err != nil {
		t.Fatal(err)
	}
	if early.OK || early.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the sink matches the final upstream: %+v", early)
	}

	// Removing the changefeed releases the slot and the publication.
	if _, err := c.RemoveChangefeed(ctx, "pg"); err != nil {
		t.Fatal(err)
	}
	out, err := srv.Psql(ctx, "shop", "SELECT count(*) FROM pg_replication_slots; SELECT count(*) FROM pg_publication")
	if err != nil || out != "0\n0\n" {
		t.Fatalf("after removal: %q %v", out, err)
	}
}

// atPosition reads the upstream now but claims an earlier point, so the
// sink is rebuilt only up to it.
type atPosition struct {
	verify.Upstream
	at time.Time
}

func (a atPosition) Snapshot(ctx context.Context, tables []string) (time.Time, map[string]verify.Rows, error) {
	_, rows, err := a.Upstream.Snapshot(ctx, tables)
	return a.at, rows, err
}

// PostgreSQL goes down under a changefeed: the changefeed says why it
// does not advance and retries; when PostgreSQL is back it catches up by
// itself. Then a pause (the slot idle, retaining WAL) and a resume.
// Nothing is lost.
func TestPostgresOutageIsRetriedAndLosesNothing(t *testing.T) {
	t.Parallel()
	srv, dsn := startPostgres(t)
	tc := newTestCluster(t)
	tc.startCaptures(2)
	c := tc.clientWithTimeout(time.Minute)
	ctx := context.Background()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "pg", Source: dsn + "&tables=orders,items", Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, dsn)
	w.tolerant = true
	tc.waitCheckpoint(c, "pg", model.Ts(created.StartTs)+model.TsFromMillis(1000))
	tc.waitSnapshot(c, "pg")

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
	tc.eventually("changefeed get to say the source is unavailable", 30*time.Second, func() bool {
		cf, err := c.Changefeed(ctx, "pg")
		if err != nil {
			return false
		}
		why = cf.Error
		return strings.Contains(why, "source unavailable, retrying")
	})
	if cf, _ := c.Changefeed(ctx, "pg"); cf.SourceStatus == nil || cf.SourceStatus.Error == "" || !strings.HasPrefix(cf.SourceStatus.Snapshot, "done") {
		t.Fatalf("with PostgreSQL down, the slot's status should say it cannot be read, and the snapshot still show as done: %+v", cf.SourceStatus)
	}
	t.Logf("while PostgreSQL was down: %s", why)
	if err := srv.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(time.Now()))
	if cf, _ := c.Changefeed(ctx, "pg"); cf.Error != "" {
		t.Fatalf("the error stays after recovery: %q", cf.Error)
	}

	// Pause: the reader lets go of the slot, which keeps what the sink
	// has not got; resume: it goes on from the checkpoint.
	if _, err := c.PauseChangefeed(ctx, "pg"); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the paused changefeed's slot to be idle", 30*time.Second, func() bool {
		cf, err := c.Changefeed(ctx, "pg")
		return err == nil && cf.SourceStatus != nil && cf.SourceStatus.Slot != "" && !cf.SourceStatus.Active
	})
	time.Sleep(time.Second) // the workload writes while paused
	if _, err := c.ResumeChangefeed(ctx, "pg"); err != nil {
		t.Fatal(err)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(time.Now()))
	end := w.finish(t)
	tc.waitCheckpoint(c, "pg", model.TsFromTime(end.Add(100*time.Millisecond)))
	up, err := postgres.NewTableReader(dsn + "&tables=orders")
	if err != nil {
		t.Fatal(err)
	}
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return tc.waitCheckpoint(c, "pg", ts), nil }
	rep, err := verify.Database(ctx, sink, up, []string{"public.orders", "public.items"}, wait)
	if err != nil || !rep.OK || rep.Keys == 0 {
		t.Fatalf("after the outage: %+v %v", rep, err)
	}
}

// partitionFrom is the routing entry of a table's partition whose range
// starts at start (text form; "" for the first); empty when none does.
func (tc *testCluster) partitionFrom(cf model.ChangefeedID, table, start string) model.RouteEntry {
	for _, r := range tc.state().Partitions[cf] {
		if s, _ := r.Route.Span.Bounds(); r.Route.Span.Table == table && s == start {
			return r.Route
		}
	}
	return model.RouteEntry{}
}

// notCoordinator hands the coordinator's role on if node holds it: the
// coordinator is not drained.
func (tc *testCluster) notCoordinator(c *api.Client, node model.NodeID) {
	tc.t.Helper()
	if l, _ := tc.leader(); l.Node != node {
		return
	}
	if _, err := c.ResignCoordinator(context.Background(), api.ResignRequest{}); err != nil {
		tc.t.Fatal(err)
	}
	tc.eventually("another coordinator", 20*time.Second, func() bool {
		l, ok := tc.leader()
		return ok && l.Node != node
	})
}

// snapshot is the cluster's snapshot as cdcctl reads it.
func (tc *testCluster) snapshot(c *api.Client) *model.Snapshot {
	tc.t.Helper()
	s, err := c.Snapshot(context.Background())
	if err != nil {
		tc.t.Fatal(err)
	}
	return &s.Snapshot
}
