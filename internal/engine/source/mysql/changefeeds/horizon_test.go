package changefeeds

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A table keyed by a BIGINT UNSIGNED AUTO_INCREMENT, written faster than
// its snapshot copies: about 4,000 new rows a second while the snapshot
// reads 500 a second on each capture. Its two partitions copy in the
// key's index order the values of their own ranges (the keys route as
// their digits: a range cut at "37" holds 1-3, 10-36, 100-369, …) and
// stop at their range's last row when their first full chunk was read
// (their horizons); the stream carries the rows inserted after. So the snapshot finishes while the inserts go
// on (before, the copy read on after the new rows as they came, and
// never finished), the table rebuilt from the sink equals MariaDB's, and
// every row was inserted once: those that existed by the copy, the new
// ones by the stream.
func TestATableWrittenFasterThanItCopiesFinishesItsSnapshot(t *testing.T) {
	t.Parallel()
	const existing = 6000
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE seq (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO seq SELECT seq, CONCAT('v', seq) FROM seq_1_to_6000")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=seq&snapshot-rate=500&chunk-rows=50", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.Eventually("a partition to copy its first chunk", time.Minute, func() bool {
		for _, p := range tc.State().Progress["my"] {
			if p.Progress.Copy.Horizon != "" {
				return true
			}
		}
		return false
	})

	w := enginetest.StartWriter(t, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "INSERT INTO seq (v) SELECT CONCAT('new', seq) FROM seq_1_to_200")
		return err
	}, 50*time.Millisecond)
	tc.Eventually("the snapshot to finish while rows are inserted faster than it copies", time.Minute, func() bool {
		w.Failed(t)
		return strings.HasPrefix(tc.CopySummary("my"), "done")
	})
	during := 200 * w.Writes()
	w.Stop(t)
	end := time.Now()
	// The rows there are, counted by the server: an insert cut short by
	// the cancel may have committed all the same.
	var total int64
	if err := db.QueryRow("SELECT COUNT(*) FROM seq").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if during < 1000 {
		t.Fatalf("only %d rows were inserted while the snapshot copied: the test proves nothing", during)
	}

	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.seq"}, end)
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after %d new rows: %+v", total-existing, rep)
	}
	tc.InsertedOnce("my", "shop.seq", total)
	t.Logf("%d rows inserted while the snapshot copied, %d in all: %+v", during, total-existing, rep.TableReports)
}
