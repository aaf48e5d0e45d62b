package mysql_test

import (
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table dropped upstream ends: the sink gets its DROP TABLE at the
// drop's position, the changefeed's status lists it as dropped with what
// to do, and the other tables go on; a table renamed upstream is held,
// listed with the reason and the fix, never decoded under a schema that
// no longer holds. The operator removes both ('changefeed update'), and
// the changefeed goes on, the remaining table equal to MariaDB's.
func TestADroppedTableEndsAndARenamedOneIsHeldAndListed(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db,
		`CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT NOT NULL)`,
		`CREATE TABLE audit (id BIGINT PRIMARY KEY, what VARCHAR(16))`,
		`CREATE TABLE moved (id BIGINT PRIMARY KEY, v INT)`,
		`INSERT INTO orders VALUES (1, 1), (2, 2)`, `INSERT INTO audit VALUES (1, 'a')`, `INSERT INTO moved VALUES (1, 1)`)
	tc, sink := followShop(t, srv, "orders,audit,moved&auto-remedy=false", 1)
	mysqltest.Exec(t, db, `INSERT INTO audit VALUES (2, 'b')`, `INSERT INTO moved VALUES (2, 2)`, `INSERT INTO orders VALUES (3, 3)`)
	tc.WaitCheckpoint("my", model.TsFromTimeMicros(time.Now()))

	mysqltest.Exec(t, db, `DROP TABLE audit`, `RENAME TABLE moved TO moved_old`, `INSERT INTO orders VALUES (4, 4)`,
		// Created again under the dropped name: another table, not
		// replicated until it is added back.
		`CREATE TABLE audit (id BIGINT PRIMARY KEY, what VARCHAR(16), extra INT)`, `INSERT INTO audit VALUES (9, 'new', 1)`)
	var issues []model.TableIssue
	tc.Eventually("the dropped and the renamed table listed", 60*time.Second, func() bool {
		issues = tc.Changefeed("my").Status.Tables
		return len(issues) == 2
	})
	want := map[string]struct{ state, says string }{
		"shop.audit": {model.TableDropped, "cdcctl changefeed update my --remove-table shop.audit"},
		"shop.moved": {model.TableHeld, "RENAME TABLE moved TO moved_old"},
	}
	for _, i := range issues {
		w, ok := want[i.Table]
		if !ok || i.State != w.state || !strings.Contains(i.Reason, w.says) {
			t.Fatalf("issue %+v; want %s %s saying %q", i, i.Table, w.state, w.says)
		}
	}
	// The DROP TABLE is in the sink, with audit's last rows before it.
	tc.Eventually("the sink to hold the DROP TABLE of audit", 30*time.Second, sinkDropped(sink, "audit"))

	// The operator's answer: both removed; the changefeed goes on.
	tc.UpdateTables("my", "shop.orders")
	mysqltest.Exec(t, db, `INSERT INTO orders VALUES (5, 5)`, `UPDATE orders SET v = 10 WHERE id = 1`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("orders after the drop, the rename and the update: %+v", rep)
	}
	if st := tc.Changefeed("my").Status; len(st.Tables) != 0 || st.State != model.ChangefeedNormal {
		t.Fatalf("after the update: %+v", st)
	}
	if by, ok := tc.Inserts("my", "shop.audit")["9"]; ok {
		t.Fatalf("a row of the table created again under the dropped name reached the sink: by %v", by)
	}
	t.Logf("issues: %+v; %+v", issues, rep.TableReports)

	// A database dropped ends every replicated table in it, as a DROP
	// TABLE of each would (it names none of them).
	mysqltest.Exec(t, db, `DROP DATABASE shop`)
	tc.Eventually("orders listed as dropped with its database", 60*time.Second, func() bool {
		issues = tc.Changefeed("my").Status.Tables
		return len(issues) == 1 && issues[0].Table == "shop.orders" && issues[0].State == model.TableDropped
	})
	tc.Eventually("the sink to hold the DROP TABLE of orders", 30*time.Second, sinkDropped(sink, "orders"))
}

// sinkDropped says whether a file sink under dir holds the DROP TABLE of
// shop.table among the table's schema files.
func sinkDropped(dir, table string) func() bool {
	return func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "shop", table, "meta", "schema_*.json"))
		for _, f := range files {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "DROP TABLE `shop`.`"+table+"`") {
				return true
			}
		}
		return false
	}
}
