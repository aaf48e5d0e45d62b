package changefeeds

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// bigTxnRows is the size of the large transaction: two hundred times a
// partition's batch (256), so it reaches the sink in parts. It was
// 200,000, which took CI two minutes and proved nothing more.
const bigTxnRows = 50_000

// A transaction of 50,000 rows (the binary log's complaint of old:
// readers timing out or running out of memory in the middle of one)
// arrives whole, at one position: inserted in one transaction, then
// a tenth of them updated in another, beside a small table's changes and its TRUNCATE
// (which reaches the sink as one). The tables rebuilt from the sink
// equal MariaDB's, nothing twice.
func TestALargeTransactionArrivesWhole(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	for _, q := range []string{
		`CREATE TABLE biglines (id INT PRIMARY KEY, qty INT NOT NULL, note VARCHAR(32))`,
		`CREATE TABLE small (id INT PRIMARY KEY)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	created := tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=biglines,small&snapshot=never", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitCheckpoint("my", created.StartTs+model.TsFromMillis(500))

	began := time.Now()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for base := 0; base < bigTxnRows; base += 5000 {
		vals := make([]string, 0, 5000)
		for id := base; id < base+5000; id++ {
			vals = append(vals, fmt.Sprintf("(%d, %d, 'line %d')", id, id%7, id))
		}
		if _, err := tx.Exec("INSERT INTO biglines VALUES " + strings.Join(vals, ", ")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO small VALUES (1)", "UPDATE biglines SET qty = qty + 1, note = NULL WHERE id % 10 = 0", "INSERT INTO small VALUES (2)",
		"TRUNCATE TABLE small", "INSERT INTO small VALUES (3)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Since(began)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.biglines", "shop.small"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys != bigTxnRows+1 {
		t.Fatalf("after a transaction of %d rows and one updating a tenth of them: %+v", bigTxnRows, rep)
	}
	// The inserts went out whole at the transaction's one position.
	at := map[string]int{}
	for _, by := range tc.Inserts("my", "shop.biglines") {
		for _, w := range by {
			_, pos, _ := strings.Cut(w, " at ")
			at[pos]++
		}
	}
	if len(at) != 1 {
		t.Fatalf("the inserts of one transaction are at %d positions: %v", len(at), at)
	}
	for pos, n := range at {
		if n != bigTxnRows {
			t.Fatalf("%d inserts at %s, want %d", n, pos, bigTxnRows)
		}
	}
	t.Logf("written in %s, in the sink and verified %s later: %d changes, %d rows equal", written.Round(time.Millisecond), (time.Since(began) - written).Round(time.Millisecond), rep.Events, rep.Keys)
}

// A table of more than 100,000 rows (boundarySample) keyed by one
// integer column is cut evenly between its smallest and its largest key,
// as a new changefeed's partitions are, without reading its rows (a
// COUNT(*) and a walk to each quantile read them all before, and a
// billion-row table's create took minutes). The rows are made by the
// server (its sequence engine): nothing streams them.
func TestALargeTableIsCutAtItsQuantiles(t *testing.T) {
	t.Parallel()
	cuts, _, read := cutsOf(t, "biglines",
		`CREATE TABLE biglines (id INT PRIMARY KEY, qty INT NOT NULL)`,
		`INSERT INTO biglines SELECT seq, seq % 7 FROM seq_0_to_199999`)
	if got := intCuts(cuts); got != "50000,100000,150000" {
		t.Fatalf("the quantiles of 200,000 keys 0 to 199,999: %v", got)
	}
	if read > 1000 {
		t.Fatalf("cutting the table read %d rows of the server's (its handlers' reads), want a few", read)
	}
}

// One whose integer keys have a key far above the others is cut at its
// exact quantiles, each read at its offset: cut by value, nearly every
// row would be in the first range. Far enough (10^15), the keys are too
// sparse on average; nearer (5,000,000 over 120,000 dense keys), they
// are dense enough on average, and the server's estimates of the ranges
// by value say they are not even.
func TestALargeTableWithAFarKeyIsCutAtItsQuantiles(t *testing.T) {
	t.Parallel()
	for _, far := range []struct{ name, key string }{{"sparse", "1000000000000000"}, {"sentinel", "5000000"}} {
		t.Run(far.name, func(t *testing.T) {
			t.Parallel()
			cuts, _, _ := cutsOf(t, far.name,
				`CREATE TABLE `+far.name+` (id BIGINT PRIMARY KEY, qty INT NOT NULL)`,
				`INSERT INTO `+far.name+` SELECT seq, seq % 7 FROM seq_0_to_119999`,
				`INSERT INTO `+far.name+` VALUES (`+far.key+`, 1)`)
			if got := intCuts(cuts); got != "30000,60000,90000" {
				t.Fatalf("the quantiles of 120,001 keys, 0 to 119,999 and %s: %v", far.key, got)
			}
		})
	}
}

// intCuts are cuts of an integer key, as text.
func intCuts(cuts []string) string {
	var out []string
	for _, c := range cuts {
		out = append(out, model.DecodeKey("int8", c))
	}
	return strings.Join(out, ",")
}

// cutsOf starts MariaDB, makes table in its database shop with setup,
// and returns where a new changefeed of it cuts it into four
// partitions, the database, and how many rows the server's handlers read
// while it cut (its status counters; nothing else uses the server then).
func cutsOf(t *testing.T, table string, setup ...string) ([]string, *sql.DB, int64) {
	t.Helper()
	srv, db := mysqltest.StartShop(t)
	for _, q := range setup {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	uri, _, err := mysql.Pin(context.Background(), "mysql://root@"+srv.Addr()+"/shop?tables="+table, "my", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := mysql.Open(uri, source.Env{Changefeed: "my"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	before := handlerReads(t, db)
	cuts, err := src.Boundaries(context.Background(), "shop."+table, 4)
	if err != nil {
		t.Fatal(err)
	}
	return cuts, db, handlerReads(t, db) - before
}

// handlerReads is the rows the server's storage engines have read, by
// key or in order, since it started (SHOW GLOBAL STATUS).
func handlerReads(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	rows, err := db.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_read_first', 'Handler_read_key', 'Handler_read_last', 'Handler_read_next', 'Handler_read_prev', 'Handler_read_rnd', 'Handler_read_rnd_next')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}
