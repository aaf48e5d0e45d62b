package changefeeds

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// The changefeed scenarios below run a PostgreSQL changefeed on the
// in-process cluster (enginetest) under a live workload, do what moves
// work or breaks it, and prove the tables rebuilt from the sink equal the
// upstream's.

// shopOrders is how many orders (and items) the shop holds before a
// changefeed: ids 1 to shopOrders (the workload inserts higher ones).
const shopOrders = 6000

// startShop starts a private PostgreSQL with database shop holding the
// tables the workload writes.
func startShop(t *testing.T) (*pgserver.Server, string) {
	t.Helper()
	return startShopOf(t, shopOrders)
}

// startShopOf is startShop with orders orders and items, and a third as
// many events.
func startShopOf(t *testing.T, orders int) (*pgserver.Server, string) {
	t.Helper()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", fmt.Sprintf(`
CREATE TABLE orders (id int8 PRIMARY KEY, region text NOT NULL, amount numeric(10,2), note text, paid bool, at timestamptz);
CREATE TABLE items (sku text, line int4, qty int4 NOT NULL, tags text[], PRIMARY KEY (sku, line));
-- No primary key, and equal rows: one partition, rows told apart by
-- their whole image.
CREATE TABLE events (kind text, payload text, n int4);
ALTER TABLE events REPLICA IDENTITY FULL;
INSERT INTO events SELECT (ARRAY['a','b'])[g %% 2 + 1], 'p' || (g %% 100), 0 FROM generate_series(1, %[2]d) g;
-- Rows that exist before any changefeed: the initial snapshot copies them.
INSERT INTO orders SELECT g, (ARRAY['eu','us','ap'])[g %% 3 + 1], g / 10.0, NULL, g %% 2 = 0, now() FROM generate_series(1, %[1]d) g;
INSERT INTO items SELECT 'sku-' || (g %% 50), g, g %% 9 + 1, ARRAY['a', 'b c'] FROM generate_series(1, %[1]d) g;`, orders, orders/3)); err != nil {
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
	n        int // committed transactions
	// committed is n for readers while the workload runs.
	committed atomic.Int64
	next      int64 // the next order id
	events    bool  // also change the keyless events table
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
		w.committed.Add(1)
		kept := live[:0]
		for _, id := range live {
			if !removed[id] {
				kept = append(kept, id)
			}
		}
		live = append(kept, added...)
		// About 40 transactions a second: a live workload through every
		// operation, whose changes the race-built engine and the two
		// rebuilds of each scenario still read in seconds.
		time.Sleep(time.Duration(10+rng.Intn(10)) * time.Millisecond)
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

// finishAfter finishes the workload once it has committed at least n
// transactions: a scenario that runs fast on an idle machine, or a
// workload slowed by a loaded one, still replicates that many (a fixed
// time committed 18 once, where the scenario asks 20).
func (w *workload) finishAfter(t *testing.T, n int) time.Time {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for w.committed.Load() < int64(n) {
		select {
		case <-w.done:
			return w.finish(t) // it stopped by itself: finish says why
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload committed %d transactions in 2 minutes; want %d", w.committed.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w.finish(t)
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

// shopTables are the tables every scenario replicates.
var shopTables = []string{"public.orders", "public.items", "public.events"}

// verifyShop rebuilds the shop's tables from changefeed pg's sink once
// its checkpoint passes end and compares them with the upstream's.
func verifyShop(t *testing.T, tc *enginetest.Cluster, dsn string, tables []string, end time.Time) verify.Report {
	t.Helper()
	return tc.VerifyDatabase("pg", upstream(t, dsn), tables, end)
}

// upstream reads the shop's tables as they are now.
func upstream(t *testing.T, dsn string) verify.Upstream {
	t.Helper()
	up, err := postgres.NewTableReader(dsn + "&tables=public.orders")
	if err != nil {
		t.Fatal(err)
	}
	return up
}

// atPosition reads the upstream now but claims an earlier point, so the
// sink is rebuilt only up to it: compared with that, the final tables
// differ, which shows a check can fail.
type atPosition struct {
	verify.Upstream
	at time.Time
}

func (a atPosition) Snapshot(ctx context.Context, tables []string) (time.Time, map[string]verify.Rows, error) {
	_, rows, err := a.Upstream.Snapshot(ctx, tables)
	return a.at, rows, err
}

// rebuiltEarly compares the sink rebuilt one second after the
// changefeed's start with the upstream's final tables.
func rebuiltEarly(t *testing.T, tc *enginetest.Cluster, dsn string, tables []string) verify.Report {
	t.Helper()
	e := tc.Changefeed("pg")
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return tc.WaitCheckpoint("pg", ts), nil }
	rep, err := verify.Database(context.Background(), e.Info.SinkURI, atPosition{upstream(t, dsn), e.Info.StartTs.Time().Add(time.Second)}, tables, wait)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// existingOrderInserts reads the sink's inserts of the orders that
// existed before the changefeed (ids up to existing; the workload
// inserts new ids): by id, which dispatcher wrote each and at what position.
func existingOrderInserts(t *testing.T, sink string, existing int) map[int][]string {
	t.Helper()
	all, err := verify.Inserts(context.Background(), sink, "public.orders")
	if err != nil {
		t.Fatal(err)
	}
	inserts := map[int][]string{}
	for k, by := range all {
		if id, _ := strconv.Atoi(k); id <= existing {
			inserts[id] = by
		}
	}
	return inserts
}
