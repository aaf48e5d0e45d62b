package changefeeds

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A table dropped upstream, of a changefeed that names its tables one by
// one, is ended by the changefeed itself once every change before the
// drop is written (removed from its tables; the sink has its DROP
// TABLE), and one dropped and created again under its name by then is
// copied in its place, as the PostgreSQL source does. Before, both
// stayed listed as dropped until an operator removed them, and the new
// table was not replicated. Under a workload on all three tables, across
// the drops: the changefeed comes to replicate the kept table and the
// new one alone, with no table listed, and the sink rebuilt equals
// MariaDB's tables.
func TestATableDroppedUpstreamIsEndedByTheChangefeedItself(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	n := strconv.Itoa(retypedRows)
	for _, table := range []string{"keep", "gone", "back"} {
		mysqltest.Exec(t, db, `CREATE TABLE `+table+` (id INT PRIMARY KEY, n INT)`, `INSERT INTO `+table+` SELECT seq, 0 FROM seq_1_to_`+n)
	}
	tc := enginetest.New(t, enginetest.Options{FollowTablesEvery: 300 * time.Millisecond})
	tc.StartCaptures(2)
	dir := t.TempDir()
	tc.CreateChangefeed("dropped", "mysql://root@"+srv.Addr()+"/shop?tables=keep,gone,back&chunk-rows=500", "file://"+dir+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("dropped")

	ctx := context.Background()
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- bumpRows(ctx, db, stop, retypedRows, "keep", "gone", "back") }()
	time.Sleep(300 * time.Millisecond)
	// The last change before the drop must reach the sink: nothing else
	// writes n = -1. Both dropped in one statement: one remedy.
	mysqltest.Exec(t, db, `UPDATE gone SET n = -1 WHERE id = 1`, `DROP TABLE gone, back`,
		`CREATE TABLE back (id INT PRIMARY KEY, n INT)`, `INSERT INTO back SELECT seq, 7 FROM seq_1_to_`+n+`_step_3`)
	tc.Eventually("the changefeed replicates shop.keep and the new shop.back alone", 120*time.Second, func() bool {
		e := tc.Changefeed("dropped")
		resumed := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
			return in.Kind == "resumed" && strings.Contains(in.Reason, "a held table's remedy")
		})
		return resumed && e.Status.State == model.ChangefeedNormal && len(e.Status.Tables) == 0 &&
			strings.Contains(e.Info.SourceURI, "back") && !strings.Contains(e.Info.SourceURI, "gone")
	})
	tc.WaitSnapshot("dropped")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, _, err := mysql.NewTableReader(tc.Changefeed("dropped").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("dropped", up, []string{"shop.keep", "shop.back"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the drops were followed: %+v", rep)
	}
	// (The reader's DROP TABLE `shop`.`gone`, or the coordinator's DROP
	// TABLE shop.gone where the table's partitions ended just below it.)
	if !enginetest.FileSinkHolds(t, dir, true, "DROP TABLE ", "shop", "gone") {
		t.Fatal("the sink has no DROP TABLE of shop.gone among its schema files")
	}
	if !enginetest.FileSinkHolds(t, dir, false, `"n":"-1"`, "shop", "gone") {
		t.Fatal("the last change of shop.gone before its drop is not in the sink")
	}
	t.Logf("%+v", rep.TableReports)
}

// bumpRows adds 1 to column n of rows 1..rows of each table, a row of
// each every 2 ms, until stop; a table that does not exist (dropped
// meanwhile) is passed over.
func bumpRows(ctx context.Context, db *sql.DB, stop chan struct{}, rows int, tables ...string) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		for _, table := range tables {
			q := fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", table, 1+i%rows)
			if _, err := db.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "doesn't exist") {
				return err
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
