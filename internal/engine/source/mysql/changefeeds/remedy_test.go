package changefeeds

import (
	"context"
	"fmt"
	"slices"
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

// A table held for a change that only copying it again undoes is copied
// again by the changefeed itself (removed and added back in one pause),
// as the hold's reason told an operator to: here a partition exchanged
// with another table's rows (rows the binary log never carries) and a
// primary key moved to other columns (partitions are ranges of the old
// key). Under a workload on all three tables, both come back without a
// table held, and the sink rebuilt equals the upstream's tables. A
// changefeed with snapshot=never keeps them held (added back, they would
// be empty).
func TestAHeldTableIsCopiedAgainByTheChangefeedItself(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	n := strconv.Itoa(retypedRows)
	mysqltest.Exec(t, db,
		`CREATE TABLE p (id INT PRIMARY KEY, n INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (1000), PARTITION p1 VALUES LESS THAN MAXVALUE)`,
		`INSERT INTO p SELECT seq, 0 FROM seq_1_to_`+n,
		`CREATE TABLE x (id INT PRIMARY KEY, n INT)`,
		`INSERT INTO x SELECT seq, 7 FROM seq_500_to_530`,
		`CREATE TABLE k (id INT PRIMARY KEY, code INT NOT NULL, n INT)`,
		`INSERT INTO k SELECT seq, 100000 - seq, 0 FROM seq_1_to_`+n,
		`CREATE TABLE beside (id INT PRIMARY KEY, n INT)`,
		`INSERT INTO beside SELECT seq, 0 FROM seq_1_to_`+n)
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tc.CreateChangefeed("healed", "mysql://root@"+srv.Addr()+"/shop?tables=p,k,beside&chunk-rows=500", sink, 2)
	// Without a snapshot a table added back would be empty: held.
	tc.CreateChangefeed("never", "mysql://root@"+srv.Addr()+"/shop?tables=p,k,beside&snapshot=never", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("healed")

	ctx := context.Background()
	stop, done := make(chan struct{}), make(chan error, 1)
	var writes atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			id := 1 + i%retypedRows
			for _, q := range []string{
				fmt.Sprintf("UPDATE p SET n = n + 1 WHERE id = %d", id),
				fmt.Sprintf("UPDATE k SET n = n + 1 WHERE id = %d", id),
				fmt.Sprintf("UPDATE beside SET n = n + 1 WHERE id = %d", id),
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					done <- err
					return
				}
			}
			writes.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	mysqltest.Exec(t, db, `ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x`,
		`ALTER TABLE k DROP PRIMARY KEY, ADD PRIMARY KEY (code)`)
	tc.Eventually("both tables copied again by the changefeed, none held", 60*time.Second, func() bool {
		e := tc.Changefeed("healed")
		resumed := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
			return in.Kind == "resumed" && strings.Contains(in.Reason, "a held table's remedy")
		})
		return resumed && e.Status.State == model.ChangefeedNormal && len(e.Status.Tables) == 0
	})
	tc.WaitSnapshot("healed")
	tc.Eventually("the changefeed without a snapshot holds both", 30*time.Second, func() bool {
		return len(tc.Changefeed("never").Status.Tables) == 2
	})
	for _, ti := range tc.Changefeed("never").Status.Tables {
		if ti.State != model.TableHeld || ti.CopyAgain {
			t.Fatalf("the changefeed with snapshot=never: %+v", ti)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, _, err := mysql.NewTableReader(tc.Changefeed("healed").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("healed", up, []string{"shop.p", "shop.k", "shop.beside"}, time.Now())
	if !rep.OK {
		t.Fatalf("after the held tables were copied again (%d writes): %+v", writes.Load(), rep)
	}
	t.Logf("%d writes; %+v", writes.Load(), rep.TableReports)
}
