package mysql_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// MariaDB compresses the binary log's events when log_bin_compress is on
// (rows and statements over log_bin_compress_min_len bytes): its rows
// events then have types of their own. They are read as the plain ones
// are: inserts, updates (a key change too), deletes and a schema change
// among them, every row as the server shows it, nothing held.
func TestACompressedBinaryLogIsRead(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", []string{"--log-bin-compress=ON", "--log-bin-compress-min-len=10"},
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(200), qty INT)")
	dsn, log := up.dsn, up.log
	long := strings.Repeat("a long note, compressed ", 6)
	exec(t, dsn,
		"INSERT INTO orders VALUES (1, '"+long+"', 1), (2, 'two', 2), (3, '"+long+"', 3)",
		"UPDATE orders SET note = 'uno, no longer long', qty = 10 WHERE id = 1",
		"UPDATE orders SET id = 30 WHERE id = 3",
		"ALTER TABLE orders ADD COLUMN extra VARCHAR(100) DEFAULT 'a default value long enough'",
		"INSERT INTO orders (id, note) VALUES (4, '"+long+"')",
		"DELETE FROM orders WHERE id = 2",
		// Every row again in the new schema (the rebuild here does not
		// give older rows the added column's DEFAULT).
		"UPDATE orders SET qty = COALESCE(qty, 0) + 1")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	var ops []string
	var rows []source.Event
	ddls := 0
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			ddls++
			continue
		}
		rows = append(rows, e)
		ops = append(ops, e.Op.String()+":"+keyText(e))
	}
	if ddls != 1 {
		t.Fatalf("%d schema changes, want the ALTER", ddls)
	}
	if got := strings.Join(ops, " "); got != "INSERT:1 INSERT:2 INSERT:3 UPDATE:1 DELETE:3 INSERT:30 INSERT:4 DELETE:2 UPDATE:1 UPDATE:4 UPDATE:30" {
		t.Fatalf("the changes in order: %s", got)
	}
	if got, want := rebuild(rows), selectAll(t, dsn, "orders"); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt from the binary log:\n%q\nread back:\n%q", got, want)
	}
}
