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

// The remedy a held table's reason names, done as an operator does it:
// in one pause, the table removed and added back. The reader resumes
// from the changefeed's checkpoint, before the statement that held it;
// and a table replaced upstream while the changefeed was paused, removed
// and added back in that pause, is read from before its replacement. A
// table added back is copied as it is now, so neither those statements
// nor the table's rows from before them (of an earlier table of its
// name) may reach the sink again: no table is held (again), and the sink
// rebuilt equals the tables.
func TestATableHeldUpstreamIsReplicatedAgainByTheRemedyInOnePause(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, `CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))`,
		`CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(10))`,
		`CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(10)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (1000), PARTITION p1 VALUES LESS THAN MAXVALUE)`,
		`CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(10))`)
	for i := 1; i <= 100; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO a VALUES (%d, 'a')", i), fmt.Sprintf("INSERT INTO c VALUES (%d, 'c')", i),
			fmt.Sprintf("INSERT INTO p VALUES (%d, 'p'), (%d, 'p')", i, 1000+i))
	}
	for i := 1; i <= 30; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO x VALUES (%d, 'x')", 500+i))
	}
	tc, _ := followShop(t, srv, "a,c,p&auto-remedy=false", 2)
	held := func() map[string]string {
		out := map[string]string{}
		for _, i := range tc.Changefeed("my").Status.Tables {
			if i.State == model.TableHeld {
				out[i.Table] = i.Reason
			}
		}
		return out
	}
	// p's first partition exchanged with x's rows: p is held.
	for i := 101; i <= 110; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO a VALUES (%d, 'a')", i), fmt.Sprintf("INSERT INTO p VALUES (%d, 'p')", i))
	}
	mysqltest.Exec(t, db, "DELETE FROM p WHERE id = 1001", "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x")
	tc.Eventually("p held", 30*time.Second, func() bool { return held()["shop.p"] != "" })
	// The operator pauses; meanwhile rows of c are written, and c is
	// replaced by a new table of the same columns: the reader resumes
	// before all of it.
	tc.SetState("my", model.ChangefeedPaused)
	for i := 101; i <= 110; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO c VALUES (%d, 'old')", i))
	}
	mysqltest.Exec(t, db, "UPDATE c SET v = 'gone' WHERE id <= 10", "CREATE OR REPLACE TABLE c (id INT PRIMARY KEY, v VARCHAR(10))")
	for i := 1; i <= 40; i++ {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO c VALUES (%d, 'new')", i*3))
	}
	mysqltest.Exec(t, db, "UPDATE p SET v = 'moved' WHERE id BETWEEN 501 AND 505", "INSERT INTO p VALUES (2000, 'late')")
	// In the same pause, both removed and added back, as p's reason says.
	if !strings.Contains(held()["shop.p"], "--copy-table shop.p") {
		t.Fatalf("p held because %q", held()["shop.p"])
	}
	tc.UpdateTablesInOnePause("my", []string{"shop.a"}, []string{"shop.a", "shop.c", "shop.p"})
	tc.WaitSnapshot("my")
	mysqltest.Exec(t, db, "DELETE FROM c WHERE id = 30", "UPDATE c SET v = 'after' WHERE id = 3", "UPDATE p SET v = 'after' WHERE id = 1002")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.a", "shop.c", "shop.p"}, time.Now())
	// a: 110; c: 40 new rows less one; p: x's 30 rows, 99 left of p1 and one late.
	if want := 110 + 39 + 30 + 99 + 1; !rep.OK || rep.Keys != want {
		t.Fatalf("after the remedy (want %d keys): %+v", want, rep)
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("held again after the remedy: %v", h)
	}
}
