package changefeeds

import (
	"context"
	"database/sql"
	"math/rand"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A table of a changefeed that names its tables one by one, renamed
// upstream (RENAME TABLE), is followed under its new name by itself, as
// table rules follow one: it used to be held until an operator paused,
// updated and resumed the changefeed. Under a workload that goes on
// writing it under the new name, the changefeed comes to replicate
// shop.orders_v2 in place of shop.orders with no table held, and the
// sink rebuilt equals the upstream's tables, with no change written
// twice; a table renamed by ALTER TABLE … RENAME TO likewise. A second
// changefeed, auto-remedy=false, keeps the table held; a swap (RENAME
// TABLE a TO a_old, b TO a) holds it too, and so does one in two
// statements (its old name a table again).
func TestATableRenamedUpstreamIsFollowedUnderItsNewName(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	n := strconv.Itoa(retypedRows)
	mysqltest.Exec(t, db,
		`CREATE TABLE orders (id INT PRIMARY KEY, n INT)`,
		`INSERT INTO orders SELECT seq, 0 FROM seq_1_to_`+n,
		`CREATE TABLE beside (id INT PRIMARY KEY, n INT)`,
		`INSERT INTO beside SELECT seq, 0 FROM seq_1_to_`+n,
		`CREATE TABLE altered (id INT PRIMARY KEY, n INT)`,
		`INSERT INTO altered SELECT seq, seq FROM seq_1_to_100`,
		`CREATE TABLE swapped (id INT PRIMARY KEY, n INT)`,
		`CREATE TABLE swapped_new (id INT PRIMARY KEY, n INT)`,
		`CREATE TABLE twostep (id INT PRIMARY KEY, n INT)`)
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	base := "mysql://root@" + srv.Addr() + "/shop?tables="
	tc.CreateChangefeed("renamed", base+"orders,beside,swapped,altered,twostep&chunk-rows=500", sink, 2)
	tc.CreateChangefeed("kept", base+"orders&auto-remedy=false", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("renamed")
	tc.WaitSnapshot("kept")

	ctx := context.Background()
	var orders atomic.Value
	orders.Store("orders")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- renameWorkload(ctx, db, stop, &orders) }()
	time.Sleep(300 * time.Millisecond)
	mysqltest.Exec(t, db, `RENAME TABLE orders TO orders_v2`, `RENAME TABLE swapped TO swapped_old, swapped_new TO swapped`,
		`ALTER TABLE altered RENAME TO altered_v2`, `UPDATE altered_v2 SET n = n + 1 WHERE id < 10`,
		// A swap in two statements: whichever sees it (the reader at
		// the rename, or the coordinator before it pauses), twostep is
		// not followed to twostep_old.
		`RENAME TABLE twostep TO twostep_old`, `CREATE TABLE twostep (id INT PRIMARY KEY, n INT)`)
	orders.Store("orders_v2")
	mysqltest.Exec(t, db, `INSERT INTO swapped_old VALUES (1, 1)`)
	tc.Eventually("the changefeed replicates shop.orders_v2 in place of shop.orders", 60*time.Second, func() bool {
		e := tc.Changefeed("renamed")
		if e == nil || e.Status.State != model.ChangefeedNormal || !strings.Contains(e.Info.SourceURI, "shop.orders_v2") || strings.Contains(e.Info.SourceURI, "shop.orders%2C") ||
			!strings.Contains(e.Info.SourceURI, "shop.altered_v2") {
			return false
		}
		// Only the swapped tables are held.
		return len(e.Status.Tables) == 2 && e.Status.Tables[0].Table == "shop.swapped" && e.Status.Tables[1].Table == "shop.twostep"
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	e := tc.Changefeed("renamed")
	if ti := e.Status.Tables[0]; ti.State != model.TableHeld || ti.RenamedTo != "" || !strings.Contains(ti.Reason, "renamed upstream to shop.swapped_old") {
		t.Fatalf("the table swapped with another: %+v", ti)
	}
	if ti := e.Status.Tables[1]; ti.State != model.TableHeld || !strings.Contains(ti.Reason, "renamed upstream to shop.twostep_old") || strings.Contains(e.Info.SourceURI, "twostep_old") {
		t.Fatalf("the table swapped in two statements: %+v (%s)", ti, e.Info.SourceURI)
	}
	tc.UpdateTables("renamed", "shop.orders_v2", "shop.beside", "shop.altered_v2") // the swapped table removed
	tc.WaitSnapshot("renamed")
	up, _, err := mysql.NewTableReader(tc.Changefeed("renamed").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("renamed", up, []string{"shop.orders_v2", "shop.beside", "shop.altered_v2"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the rename was followed: %+v", rep)
	}
	kept := tc.Changefeed("kept")
	if len(kept.Status.Tables) != 1 || kept.Status.Tables[0].State != model.TableHeld || kept.Status.Tables[0].RenamedTo != "" {
		t.Fatalf("the changefeed with auto-remedy=false: %+v", kept.Status.Tables)
	}
	t.Logf("%+v", rep.TableReports)
}

// renameWorkload updates, deletes and inserts rows of the orders table,
// under the name it has (a write under the old name after the rename
// fails and the next goes under the new one), and of beside, until
// stopped.
func renameWorkload(ctx context.Context, db *sql.DB, stop chan struct{}, orders *atomic.Value) error {
	rng := rand.New(rand.NewSource(13))
	next := 100_000
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		table := "beside"
		if rng.Intn(2) == 0 {
			table = orders.Load().(string)
		}
		id := 1 + rng.Intn(retypedRows)
		var err error
		switch rng.Intn(6) {
		case 0:
			_, err = db.ExecContext(ctx, `INSERT INTO `+table+` (id, n) VALUES (?, 1)`, next)
			next++
		case 1:
			_, err = db.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = ?`, id)
		default:
			_, err = db.ExecContext(ctx, `UPDATE `+table+` SET n = n + 1 WHERE id = ?`, id)
		}
		if err != nil && !strings.Contains(err.Error(), "doesn't exist") {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}
