package mysql_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// Tables keyed by a time first (a time series, a zero date among its
// keys), by a DECIMAL (its text out of its order) and by a TIME (before
// zero, past a day) are copied in their keys' index order through three
// partitions each, while rows are added, changed, re-keyed and deleted,
// and arrive equal to the tables.
func TestTablesKeyedByTimeOrAmountReplicate(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db,
		`CREATE TABLE events (at DATETIME(6), id INT, note VARCHAR(20), PRIMARY KEY (at, id))`,
		`INSERT INTO events SELECT IF(seq = 1, '0000-00-00 00:00:00', TIMESTAMP('2024-01-01') + INTERVAL seq * 3571 SECOND + INTERVAL seq MICROSECOND), seq % 3, CONCAT('e', seq) FROM seq_1_to_2000`,
		`CREATE TABLE ledger (amount DECIMAL(12,3) PRIMARY KEY, n INT NOT NULL)`,
		`INSERT INTO ledger SELECT IF(seq % 2, -1, 1) * CAST(seq AS SIGNED) * 1.5 / 7, seq FROM seq_1_to_2000`,
		`CREATE TABLE shifts (tm TIME(1) PRIMARY KEY, n INT NOT NULL)`,
		`INSERT INTO shifts SELECT SEC_TO_TIME(CAST(seq AS SIGNED) * 997 - 1000000 + (seq % 2) * 0.5), seq FROM seq_1_to_2000`)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("keys", "mysql://root@"+srv.Addr()+"/shop?tables=events,ledger,shifts&chunk-rows=150", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	mysqltest.Exec(t, db,
		`INSERT INTO events SELECT TIMESTAMP('2023-06-01') + INTERVAL seq HOUR, 7, 'new' FROM seq_1_to_300`,
		`UPDATE events SET note = 'changed' WHERE id = 1`,
		`UPDATE events SET at = at + INTERVAL 1 MICROSECOND WHERE id = 2 AND at > '2024-02-01'`,
		`DELETE FROM events WHERE id = 0 AND at < '2024-03-01'`,
		`INSERT INTO ledger SELECT 100000 + seq / 8, -seq FROM seq_1_to_300`,
		`UPDATE ledger SET amount = -amount - 0.001 WHERE n % 7 = 0`,
		`DELETE FROM ledger WHERE n % 11 = 0`,
		`UPDATE shifts SET tm = ADDTIME(tm, '00:00:00.1'), n = n + 5000 WHERE n % 5 = 0`,
		`DELETE FROM shifts WHERE n % 13 = 0`)
	tc.WaitSnapshot("keys")
	mysqltest.Exec(t, db, `UPDATE ledger SET n = n + 1 WHERE n % 3 = 0`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("keys").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("keys", up, []string{"shop.events", "shop.ledger", "shop.shifts"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys < 5500 {
		t.Fatalf("tables keyed by a time or an amount: %+v", rep)
	}
}
