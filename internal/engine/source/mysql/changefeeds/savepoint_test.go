package changefeeds

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// Rows a rollback to a savepoint undid, which MariaDB keeps in the binary
// log when the transaction also changed a table that cannot roll back (a
// MyISAM counter beside an ORM's nested transactions), never reach the
// sink, also when the reader sent them to the event log in parts (5,000
// rows after the savepoint, 10,000 kept before it): the tables rebuilt
// from the sink equal MariaDB's, nothing twice. Before, the undone rows
// were in the sink.
func TestRowsARollbackToASavepointUndidNeverReachTheSink(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(32))",
		"CREATE TABLE counter (id INT PRIMARY KEY, n INT) ENGINE=MyISAM", "INSERT INTO counter VALUES (1, 0)")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	created := tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=orders,counter&snapshot=never", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitCheckpoint("my", created.StartTs+model.TsFromMillis(500))

	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"BEGIN", "INSERT INTO orders SELECT seq, 'kept' FROM seq_1_to_10000", "SAVEPOINT s",
		"UPDATE counter SET n = n + 1", "INSERT INTO orders SELECT 100000 + seq, 'undone' FROM seq_1_to_5000",
		"UPDATE orders SET note = 'undone' WHERE id <= 100", "ROLLBACK TO SAVEPOINT s",
		"INSERT INTO orders VALUES (20000, 'kept')", "COMMIT",
		"BEGIN", "UPDATE counter SET n = n + 1", "SAVEPOINT a", "DELETE FROM orders WHERE id <= 500",
		"ROLLBACK TO a", "UPDATE orders SET note = 'changed' WHERE id <= 10", "COMMIT",
	} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders", "shop.counter"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys != 10001+1 {
		t.Fatalf("after rollbacks to savepoints beside a MyISAM table: %+v", rep)
	}
}
