package mysql_test

import (
	"fmt"
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
	srv, db := startShopDB(t)
	execDB(t, db, `CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))`, `CREATE TABLE c (x INT, y INT, v VARCHAR(10), PRIMARY KEY (x))`)
	for i := 1; i <= 100; i++ {
		execDB(t, db, fmt.Sprintf("INSERT INTO a VALUES (%d, 'x')", i), fmt.Sprintf("INSERT INTO c VALUES (%d, %d, 'z')", i, 101-i))
	}
	tc, _ := followShop(t, srv, "a,c", 2)
	execDB(t, db, "ALTER TABLE a MODIFY id BIGINT", "INSERT INTO a VALUES (5000000000, 'big')", "UPDATE a SET v = 'u' WHERE id < 10", "DELETE FROM a WHERE id = 50",
		"ALTER TABLE c DROP PRIMARY KEY, ADD PRIMARY KEY (y, x)", "INSERT INTO c VALUES (1000, 1, 'n')", "UPDATE c SET v = 'u' WHERE x < 10")
	var reason string
	tc.Eventually("c held", 30*time.Second, func() bool {
		for _, i := range tc.Changefeed("my").Status.Tables {
			if i.Table == "shop.c" && i.State == model.TableHeld {
				reason = i.Reason
			}
		}
		return reason != ""
	})
	if !strings.Contains(reason, "its primary key changed") || !strings.Contains(reason, "--remove-table shop.c") || strings.Contains(reason, "create it again") {
		t.Fatalf("c held because %q", reason)
	}
	tc.UpdateTablesInOnePause("my", []string{"shop.a"}, []string{"shop.a", "shop.c"}) // as the reason says
	tc.WaitSnapshot("my")
	execDB(t, db, "DELETE FROM c WHERE x = 30", "UPDATE c SET v = 'after' WHERE y = 1")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.a", "shop.c"}, time.Now())
	if !rep.OK || rep.Keys != 100+100 {
		t.Fatalf("after the remedy: %+v", rep)
	}
	if st := tc.Changefeed("my").Status; len(st.Tables) != 0 {
		t.Fatalf("still held: %+v", st.Tables)
	}
}
