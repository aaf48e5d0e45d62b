package changefeeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A MariaDB changefeed under a live workload (inserts, updates, deletes,
// key changes, rollbacks, on an integer key and a composite text key)
// through a split at a key, a move of the upper half, and a drain of the
// capture that runs the binary log reader (which resumes on another
// capture from the checkpoint, taking the server id over): the tables
// rebuilt from the sink equal MariaDB's at the same point, checked while
// the workload runs, nothing twice. Then a kill -9 of the capture the
// reader moved to: the reader resumes on the last one, nothing lost, and
// (the sink delivers exactly once) nothing twice, every transaction's
// BEGIN and END once, counting its rows.
func TestAChangefeedGoesThroughASplitAMoveADrainAndAReaderCrash(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	if _, err := db.Exec(`CREATE TABLE orders (id BIGINT PRIMARY KEY, region VARCHAR(8) NOT NULL, amount DECIMAL(10,2), note TEXT, at DATETIME(6))`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE items (sku VARCHAR(32), line INT, qty INT NOT NULL, PRIMARY KEY (sku, line))`); err != nil {
		t.Fatal(err)
	}
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	uri := "mysql://root@" + srv.Addr() + "/shop?tables=orders,items&snapshot=never"
	// Exactly once with transaction boundaries: after the crash below
	// too, every transaction is whole and nothing is written twice.
	sink := "file://" + t.TempDir() + "?flush-interval=100ms&transaction-meta=true&delivery=exactly-once"
	created := tc.CreateChangefeed("my", uri, sink, 2)
	w := startShopWorkload(t, db, 0)
	tc.WaitCheckpoint("my", created.StartTs+model.TsFromMillis(1000))
	for w.nextID() < 200 {
		time.Sleep(100 * time.Millisecond)
	}

	orders := tc.PartitionFrom("my", "shop.orders", "")
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, orders.ID, "100", plan.DefaultCosts) })
	upper := tc.PartitionFrom("my", "shop.orders", "100")
	if upper.ID == "" {
		t.Fatalf("no partition starting at 100 in %+v", tc.State().Partitions["my"])
	}
	tc.MoveElsewhere(upper.ID)
	reader := tc.MaintainerOf("my")
	tc.NotCoordinator(reader)
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Drain(s, reader, 2, plan.DefaultCosts) })
	moved := tc.MaintainerOf("my")
	if moved == reader {
		t.Fatalf("the reader is still on %s after its drain", reader)
	}

	// Everything so far was graceful: under the running workload (the
	// cut of the read is exact, whatever commits meanwhile) the tables
	// rebuilt from the sink equal MariaDB's, nothing twice.
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	tables := []string{"shop.orders", "shop.items"}
	graceful := tc.VerifyDatabase("my", up, tables, time.Now())
	if !graceful.OK || graceful.Duplicates != 0 || graceful.Keys == 0 {
		t.Fatalf("after a split, a move and a drain, under load: %+v", graceful)
	}
	// With transaction-meta: every transaction up to the checkpoint has a
	// BEGIN and an END whose counts are its rows in the sink, however its
	// rows were spread over the partitions.
	tx := enginetest.ReadTransactions(t, sink)
	if bad := tx.Check(true, 0, model.Ts(graceful.CheckedUpToTs)); len(bad) > 0 || len(tx.Ends) < 50 {
		t.Fatalf("%d transactions; a consumer would find:\n%s", len(tx.Ends), strings.Join(bad, "\n"))
	}

	// Kill the capture the reader moved to: the last capture runs
	// everything, its reader resuming from the checkpoint under the same
	// server id.
	tc.Crash(moved)
	tc.WaitCheckpoint("my", model.TsFromTimeMicros(time.Now()))
	end := w.finish(t)
	if w.n < 50 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	rep := tc.VerifyDatabase("my", up, tables, end)
	if !rep.OK || rep.Keys == 0 || rep.Duplicates != 0 {
		t.Fatalf("after a crash of the reader's capture: %+v", rep)
	}
	t.Logf("%d transactions, %d changes, %d rows equal: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	tx = enginetest.ReadTransactions(t, sink)
	if bad := tx.Check(true, 0, model.Ts(rep.CheckedUpToTs)); len(bad) > 0 || tx.Duplicates != 0 {
		t.Fatalf("after the crash, %d transactions, %d records or rows written twice; a consumer would find:\n%s", len(tx.Ends), tx.Duplicates, strings.Join(bad, "\n"))
	}
	// Verify checks the same (cdcctl verify prints it).
	if rep.Transactions == nil || rep.Transactions.Checked < 50 || len(rep.Transactions.Problems) > 0 || rep.Transactions.Duplicates != 0 {
		t.Fatalf("verify's check of the transactions: %+v", rep.Transactions)
	}

	// The check can fail: the upstream read now, compared with the sink
	// only up to one second after the changefeed began, differs.
	early := verify.Upstream(atPosition{up, created.StartTs + model.TsFromMillis(1000)})
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return tc.WaitCheckpoint("my", ts), nil }
	bad, err := verify.Database(context.Background(), tc.Changefeed("my").Info.SinkURI, early, []string{"shop.orders"}, wait)
	if err != nil || bad.OK || bad.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the sink matches the final upstream: %+v %v", bad, err)
	}

	// Removing the changefeed forgets its rows of the signal table.
	tc.RemoveChangefeed("my")
	var left int
	if err := db.QueryRow("SELECT count(*) FROM cdcctl_signal").Scan(&left); err != nil || left != 0 {
		t.Fatalf("after the removal the signal table holds %d rows (%v)", left, err)
	}
}

// atPosition reads the upstream now but claims an earlier position.
type atPosition struct {
	up *mysql.TableReader
	at model.Ts
}

func (a atPosition) Snapshot(ctx context.Context, tables []string) (time.Time, map[string]verify.Rows, error) {
	_, rows, err := a.up.SnapshotAt(ctx, tables)
	return a.at.Time(), rows, err
}

func (a atPosition) SnapshotAt(ctx context.Context, tables []string) (model.Ts, map[string]verify.Rows, error) {
	_, rows, err := a.up.SnapshotAt(ctx, tables)
	return a.at, rows, err
}

// shopWorkload writes transactions into orders and items until finished.
type shopWorkload struct {
	db   *sql.DB
	stop chan struct{}
	done chan struct{}
	err  error
	n    int // committed transactions

	next chan int64 // the next order id, read by the test
}

// startShopWorkload starts the workload on orders whose ids 1 to
// existing exist already (the workload updates, deletes and re-keys them
// too); its new orders take the ids after.
func startShopWorkload(t *testing.T, db *sql.DB, existing int64) *shopWorkload {
	live := make([]int64, 0, existing)
	for id := int64(1); id <= existing; id++ {
		live = append(live, id)
	}
	return startShopWorkloadOn(t, db, live, existing+1)
}

// startShopWorkloadOn starts the workload on the orders live; its new
// orders take the ids from next on.
func startShopWorkloadOn(t *testing.T, db *sql.DB, live []int64, next int64) *shopWorkload {
	w := &shopWorkload{db: db, stop: make(chan struct{}), done: make(chan struct{}), next: make(chan int64, 1)}
	w.next <- next
	go w.run(live)
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			w.finish(t)
		}
	})
	return w
}

func (w *shopWorkload) nextID() int64 {
	id := <-w.next
	w.next <- id
	return id
}

func (w *shopWorkload) finish(t *testing.T) time.Time {
	t.Helper()
	close(w.stop)
	<-w.done
	if w.err != nil {
		t.Fatalf("workload: %v", w.err)
	}
	return time.Now()
}

func (w *shopWorkload) run(live []int64) {
	defer close(w.done)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		tx, err := w.db.BeginTx(ctx, nil)
		if err != nil {
			w.err = err
			return
		}
		next := <-w.next
		added, removed := []int64{}, map[int64]bool{}
		for range 1 + rng.Intn(5) {
			switch op := rng.Intn(10); {
			case op < 4 || len(live) < 5:
				id := next
				next++
				_, err = tx.Exec(`INSERT INTO orders VALUES (?, ?, ?, NULL, NOW(6))`, id, []string{"eu", "us", "ap"}[id%3], fmt.Sprintf("%d.%02d", rng.Intn(1000), rng.Intn(100)))
				if err == nil {
					_, err = tx.Exec(`INSERT INTO items VALUES (?, ?, ?)`, fmt.Sprintf("sku-%d", id%50), id, rng.Intn(9)+1)
				}
				added = append(added, id)
			case op < 7:
				id := live[rng.Intn(len(live))]
				_, err = tx.Exec(`UPDATE orders SET amount = amount + 1, note = ? WHERE id = ?`, fmt.Sprintf("n%d", rng.Intn(100)), id)
				if err == nil {
					_, err = tx.Exec(`UPDATE items SET qty = qty + 1 WHERE line = ?`, id)
				}
			case op < 9:
				if id := live[rng.Intn(len(live))]; !removed[id] {
					_, err = tx.Exec(`DELETE FROM orders WHERE id = ?`, id)
					removed[id] = true
				}
			default:
				// A key change: the row moves to a new id.
				if id := live[rng.Intn(len(live))]; !removed[id] {
					_, err = tx.Exec(`UPDATE orders SET id = ? WHERE id = ?`, next, id)
					removed[id] = true
					added = append(added, next)
					next++
				}
			}
			if err != nil {
				break
			}
		}
		w.next <- next
		if err != nil {
			_ = tx.Rollback()
			if retryable(err) {
				continue // as an application does: InnoDB undid all of it
			}
			w.err = err
			return
		}
		if rng.Intn(8) == 0 {
			if err := tx.Rollback(); err != nil {
				w.err = err
				return
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			w.err = err
			return
		}
		w.n++
		kept := live[:0]
		for _, id := range live {
			if !removed[id] {
				kept = append(kept, id)
			}
		}
		live = append(kept, added...)
		time.Sleep(time.Duration(10+rng.Intn(10)) * time.Millisecond)
	}
}

// retryable says InnoDB chose the transaction as a deadlock's victim or
// gave up its lock wait, and rolled it back: the application's part is to
// run it again (CI saw one under the snapshot's and the workload's load).
func retryable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}
