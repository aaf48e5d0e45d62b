package mysql_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// An online schema change, as gh-ost makes one (pt-online-schema-change
// names its shadow _t_new and the old table _t_old): a shadow table
// created like the table, altered, filled with the table's rows and kept
// in step with its changes, then swapped with it in one RENAME. The
// table is not held: it goes on, its schema change (the shadow's ALTER,
// written as the table's) at the swap, and the rows after it carry the
// new column; read again from before the migration, the same, and from
// a resume point in its middle (the shadow's ALTERs are kept in it) the
// same again, whatever the catalog shows by then. A plain rename of the
// table still holds it.
func TestAnOnlineSchemaChangeIsASchemaChange(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,other", []string{"--binlog-row-metadata=MINIMAL"}, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20))", "CREATE TABLE other (id INT PRIMARY KEY)")
	dsn, cfg, first, live := up.dsn, up.cfg, up.first, up.log
	exec(t, dsn, "INSERT INTO orders VALUES (1, 'one'), (2, 'two')",
		// gh-ost: the shadow, its ALTER, the copy, a change applied to
		// both (its statements as it writes them, a comment after the
		// verb)
		"create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`",
		"alter /* gh-ost */ table `shop`.`_orders_gho` ADD COLUMN qty INT NOT NULL DEFAULT 7, MODIFY note VARCHAR(40)",
		"INSERT INTO `_orders_gho` (id, note) SELECT id, note FROM orders")
	// A resume point in the middle of the migration, as a checkpoint
	// there would keep it.
	waitResolved(t, live)
	_, resolved, _ := live.state()
	mid, ok := up.p.ResumePoint(resolved)
	if !ok {
		t.Fatal("no resume point in the middle of the migration")
	}
	exec(t, dsn, "INSERT INTO orders VALUES (3, 'three')", "INSERT INTO `_orders_gho` (id, note) VALUES (3, 'three')",
		"CREATE TABLE `_orders_del` (id INT PRIMARY KEY)", "DROP TABLE `_orders_del`",
		"rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, `shop`.`_orders_gho` to `shop`.`orders`",
		"DROP TABLE IF EXISTS `_orders_del`",
		"INSERT INTO orders VALUES (4, 'a longer note than twenty', 9)", "UPDATE orders SET qty = 8 WHERE id = 1")
	waitResolved(t, live)
	want := strings.Join([]string{
		"INSERT [1 one]", "INSERT [2 two]", "INSERT [3 three]",
		"DDL v1 (id bigint(20), note varchar(40), qty int(11)): alter table `shop`.`orders` ADD COLUMN qty INT NOT NULL DEFAULT 7, MODIFY note VARCHAR(40)",
		"INSERT [4 a longer note than twenty 9]", "UPDATE [1 one 8]",
	}, "\n")
	if got := live.lines(t, true); got != want {
		t.Fatalf("read live:\n%s\nwant\n%s", got, want)
	}
	other := cfg
	other.ServerID = 78
	behind := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
	waitResolved(t, behind)
	if got := behind.lines(t, true); got != want {
		t.Fatalf("read from before the migration:\n%s\nwant\n%s", got, want)
	}
	evs, _, _ := live.state()
	rows := slices.DeleteFunc(slices.Clone(evs), func(e source.Event) bool { return e.Kind == source.KindDDL })
	got := rebuild(rows)
	for k, r := range got {
		if len(r) == 2 {
			got[k] = append(r, "7") // the DEFAULT the ALTER gave the rows copied before it
		}
	}
	if want := selectAll(t, dsn, "orders"); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt:\n%q\nupstream:\n%q", got, want)
	}

	// Started again from the middle of the migration, after a later
	// ALTER made the catalog another schema than the swap's: the shadow's
	// ALTER, kept in the resume point, is applied at the swap, not the
	// catalog's schema (which would not decode row 4).
	exec(t, dsn, "ALTER TABLE orders ADD COLUMN later INT")
	again := other
	again.ServerID = 79
	resumed := pull(t, mysql.NewPuller(again, "cf", "mariadb", nil), mid)
	waitResolved(t, resumed)
	wantMid := strings.Join([]string{
		"INSERT [3 three]",
		// (From the statement, with the types as the catalog writes them.)
		"DDL v1 (id bigint(20), note varchar(40), qty int(11)): alter table `shop`.`orders` ADD COLUMN qty INT NOT NULL DEFAULT 7, MODIFY note VARCHAR(40)",
		"INSERT [4 a longer note than twenty 9]", "UPDATE [1 one 8]",
		"DDL v2 (id bigint(20), note varchar(40), qty int(11), later int(11)): ALTER TABLE orders ADD COLUMN later INT",
	}, "\n")
	if got := resumed.lines(t, true); got != wantMid {
		t.Fatalf("read from the middle of the migration:\n%s\nwant\n%s", got, wantMid)
	}

	// A rename that is not a migration's swap holds the table.
	exec(t, dsn, "RENAME TABLE other TO other_v2")
	waitResolved(t, live)
	if _, _, held := live.state(); len(held) != 1 || held["shop.other"] == 0 {
		t.Fatalf("held after a plain rename: %v", held)
	}
}
