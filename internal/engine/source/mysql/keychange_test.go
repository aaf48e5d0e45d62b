package mysql_test

import (
	"fmt"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table's primary key changes under the changefeed: a key widened from
// INT to BIGINT goes on; a key moved to other columns holds that table
// (its partitions are ranges of the old key) with one remedy, which
// works: the table removed and added back is copied again under its new
// key, and the sink rebuilt equals both tables.
func TestAChangedPrimaryKeyHoldsItsTableUntilTheRemedyItNames(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, `CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))`, `CREATE TABLE c (x INT, y INT, v VARCHAR(10), PRIMARY KEY (x))`,
		`CREATE TABLE d (k DECIMAL(6,2) PRIMARY KEY, v VARCHAR(10))`)
	for i := 1; i <= 100; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO a VALUES (%d, 'x')", i), fmt.Sprintf("INSERT INTO c VALUES (%d, %d, 'z')", i, 101-i),
			fmt.Sprintf("INSERT INTO d VALUES (%d, 'x')", i))
	}
	tc, _ := followShop(t, srv, "a,c,d&auto-remedy=false", 2)
	mysqltest.Exec(t, db, "ALTER TABLE a MODIFY id BIGINT", "INSERT INTO a VALUES (5000000000, 'big')", "UPDATE a SET v = 'u' WHERE id < 10", "DELETE FROM a WHERE id = 50",
		"ALTER TABLE c DROP PRIMARY KEY, ADD PRIMARY KEY (y, x)", "INSERT INTO c VALUES (1000, 1, 'n')", "UPDATE c SET v = 'u' WHERE x < 10",
		// Every key of d reads otherwise now ("1.00" is "1.000"): held too.
		"ALTER TABLE d MODIFY k DECIMAL(7,3)", "UPDATE d SET v = 'u' WHERE k = 1", "DELETE FROM d WHERE k = 2")
	reasons := map[string]string{}
	tc.Eventually("c and d held", 30*time.Second, func() bool {
		for _, i := range tc.Changefeed("my").Status.Tables {
			if i.State == model.TableHeld {
				reasons[i.Table] = i.Reason
			}
		}
		return reasons["shop.c"] != "" && reasons["shop.d"] != ""
	})
	if reason := reasons["shop.c"]; !strings.Contains(reason, "its primary key changed") || !strings.Contains(reason, "--copy-table shop.c") || strings.Contains(reason, "create it again") {
		t.Fatalf("c held because %q", reason)
	}
	if reason := reasons["shop.d"]; !strings.Contains(reason, "the type of its key column k changed (decimal(6,2) to decimal(7,3))") || !strings.Contains(reason, "--copy-table shop.d") {
		t.Fatalf("d held because %q", reason)
	}
	tc.UpdateTablesInOnePause("my", []string{"shop.a"}, []string{"shop.a", "shop.c", "shop.d"}) // as the reasons say
	tc.WaitSnapshot("my")
	mysqltest.Exec(t, db, "DELETE FROM c WHERE x = 30", "UPDATE c SET v = 'after' WHERE y = 1", "DELETE FROM d WHERE k = 3", "UPDATE d SET v = 'after' WHERE k = 4")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.a", "shop.c", "shop.d"}, time.Now())
	if !rep.OK || rep.Keys != 100+100+98 {
		t.Fatalf("after the remedy: %+v", rep)
	}
	if st := tc.Changefeed("my").Status; len(st.Tables) != 0 {
		t.Fatalf("still held: %+v", st.Tables)
	}
}
