package mysql_test

import (
	"context"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table created while its changefeed is paused and then added to it
// joins at the changefeed's checkpoint, which is before its CREATE TABLE:
// the resumed reader reads that statement again, and it is the table's
// own creation, not a change to follow — the table is copied, then
// followed, never held (as the table rules do when they meet a new table
// just after it was created). A table created LIKE a replicated one, or
// from a SELECT of it, a view of it and a trigger on it leave the
// replicated one as it was.
func TestATableAddedAfterItsCreateTableIsCopiedThenFollowed(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, `CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT NOT NULL)`, `INSERT INTO orders VALUES (1, 1), (2, 2)`)
	tc, _ := followShop(t, srv, "orders", 2)
	tc.WaitCheckpoint("my", model.TsFromTimeMicros(time.Now()))

	tc.SetState("my", model.ChangefeedPaused)
	mysqltest.Exec(t, db, `CREATE TABLE extra (id INT PRIMARY KEY, v INT)`, `INSERT INTO extra VALUES (1, 1), (2, 2), (3, 3)`,
		`CREATE TABLE orders_copy LIKE orders`, `CREATE TABLE orders_sum AS SELECT id, v FROM orders`,
		`CREATE VIEW orders_v AS SELECT id, v FROM orders`,
		`CREATE TRIGGER orders_t BEFORE INSERT ON orders FOR EACH ROW SET NEW.v = NEW.v`,
		// Maintenance the binary log carries as statements naming
		// the table (held it, before statements were read by kind).
		`OPTIMIZE TABLE orders`, `ANALYZE TABLE orders`,
		`INSERT INTO orders VALUES (3, 3)`)
	if err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		res, err := c.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: "my", Tables: []string{"shop.orders", "shop.extra"}, By: "test"})
		if err == nil && (len(res.Added) != 1 || res.At >= model.TsFromTime(time.Now())) {
			t.Errorf("update: %+v", res)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tc.SetState("my", model.ChangefeedNormal)
	tc.Eventually("the added table's initial snapshot", 30*time.Second, func() bool {
		if st := tc.Changefeed("my").Status; len(st.Tables) != 0 {
			t.Fatalf("the reader reports %+v; want no table held", st.Tables)
		}
		return strings.HasPrefix(tc.CopySummary("my"), "done")
	})
	mysqltest.Exec(t, db, `INSERT INTO extra VALUES (4, 4)`, `UPDATE extra SET v = 20 WHERE id = 2`, `UPDATE orders SET v = 10 WHERE id = 1`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders", "shop.extra"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the table was added behind its CREATE TABLE: %+v", rep)
	}
	if st := tc.Changefeed("my").Status; len(st.Tables) != 0 || st.State != model.ChangefeedNormal {
		t.Fatalf("after the update: %+v", st)
	}
	t.Logf("%+v", rep.TableReports)
}
