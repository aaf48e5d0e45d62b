package changefeeds

import (
	"context"
	"database/sql"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// retypedRows is how many rows each table holds when its columns' types
// change.
const retypedRows = 3000

// A column's type changed under a changefeed changes the values of every
// row of the table (a DECIMAL's scale rounds them, a character set
// recodes them), and the server writes no row event for them: before,
// every row left alone after the ALTER kept its old value in the sink
// (2,999 of 3,000 rows differed in verify). Here, under a workload, one
// table's DECIMAL loses a digit of scale and its VARCHAR goes to latin1
// with é in it, another's VARCHAR and INT are widened (the same values),
// and the reader's capture is drained at once. The sink rebuilt equals
// the upstream's tables with no change written twice; the first table was
// copied again once, the widened one not.
func TestAColumnsTypeChangedWithNewValuesIsCopiedAgain(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	n := strconv.Itoa(retypedRows)
	mysqltest.Exec(t, db,
		`CREATE TABLE priced (id INT PRIMARY KEY, price DECIMAL(10,2), note VARCHAR(40), n INT)`,
		`INSERT INTO priced SELECT seq, seq * 1.25 / 100, CONCAT('café ', seq), 0 FROM seq_1_to_`+n,
		`CREATE TABLE widened (id INT PRIMARY KEY, note VARCHAR(20), n INT)`,
		`INSERT INTO widened SELECT seq, CONCAT('w', seq), seq FROM seq_1_to_`+n)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tc.CreateChangefeed("retyped", "mysql://root@"+srv.Addr()+"/shop?tables=priced,widened&chunk-rows=100", sink, 3)
	tc.WaitSnapshot("retyped")

	ctx := context.Background()
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- retypeWorkload(ctx, db, stop) }()
	time.Sleep(300 * time.Millisecond)
	mysqltest.Exec(t, db,
		`ALTER TABLE priced MODIFY price DECIMAL(10,1), MODIFY note VARCHAR(40) CHARACTER SET latin1`,
		`ALTER TABLE widened MODIFY note VARCHAR(80), MODIFY n BIGINT`)
	tc.DrainReader("retyped")
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	tc.WaitSnapshot("retyped")
	up, _, err := mysql.NewTableReader(tc.Changefeed("retyped").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("retyped", up, []string{"shop.priced", "shop.widened"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the types changed and a drain: %+v", rep)
	}
	for table, want := range map[string]int{"shop.priced": 2, "shop.widened": 1} {
		inserts, err := verify.Inserts(ctx, sink, table)
		if err != nil {
			t.Fatal(err)
		}
		times := map[int]int{}
		for k, by := range inserts {
			if id, _ := strconv.Atoi(strings.SplitN(k, ",", 2)[0]); id <= retypedRows {
				times[len(by)]++
			}
		}
		if len(times) > 2 || times[want] < retypedRows*9/10 || times[want+1] > 0 {
			t.Fatalf("%s: the table's first rows by how many times they were inserted: %v; want %d each (a row deleted meanwhile, fewer)", table, times, want)
		}
	}
	t.Logf("%+v", rep.TableReports)
}

// retypeWorkload updates, deletes and inserts rows of both tables until
// stopped, with statements that hold under the columns' old types and new.
func retypeWorkload(ctx context.Context, db *sql.DB, stop chan struct{}) error {
	rng := rand.New(rand.NewSource(7))
	next := 100_000
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		id := 1 + rng.Intn(retypedRows)
		var err error
		switch rng.Intn(6) {
		case 0:
			_, err = db.ExecContext(ctx, `INSERT INTO priced VALUES (?, 9.99, 'new', 0)`, next)
			next++
		case 1:
			_, err = db.ExecContext(ctx, `DELETE FROM priced WHERE id = ?`, id)
		case 2:
			_, err = db.ExecContext(ctx, `UPDATE widened SET n = n + 1 WHERE id = ?`, id)
		default:
			_, err = db.ExecContext(ctx, `UPDATE priced SET n = n + 1, price = price + 1 WHERE id = ?`, id)
		}
		if err != nil && !retryable(err) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}
