package mysql_test

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// A transaction with savepoints, as ORMs nest them, is one transaction:
// the server writes SAVEPOINT, ROLLBACK TO and RELEASE into the binary
// log between its rows, and a reader that took each for a commit cut the
// transaction there, gave a resume point past its GTID in the middle,
// and a reader started again from that point never read the rest.
// Here every row of it arrives at one position, what the rollback to a
// savepoint undid is not in it, and a reader started again from each
// resume point the first one gave reads the table to what it holds.
func TestATransactionWithSavepointsArrivesWhole(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", nil, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20))")
	dsn, cfg, live, log := up.dsn, up.cfg, up.p, up.log
	exec(t, dsn, "INSERT INTO orders VALUES (1, 'before')")
	inOneSession(t, dsn, "BEGIN",
		"INSERT INTO orders VALUES (2, 'a')", "SAVEPOINT s1",
		"INSERT INTO orders VALUES (3, 'b')", "SAVEPOINT s2",
		"INSERT INTO orders VALUES (4, 'undone')", "ROLLBACK TO SAVEPOINT s2",
		"UPDATE orders SET note = 'c' WHERE id = 2", "RELEASE SAVEPOINT s1",
		"INSERT INTO orders VALUES (5, 'd')", "COMMIT")
	exec(t, dsn, "INSERT INTO orders VALUES (6, 'after')")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	want := selectAll(t, dsn, "orders")
	if got := rebuild(evs); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt from the binary log:\n%q\nread back:\n%q", got, want)
	}
	var txn []source.Event
	for _, e := range evs {
		if k := keyText(e); k != "1" && k != "6" {
			txn = append(txn, e)
		}
	}
	for _, e := range txn {
		if e.CommitTs != txn[0].CommitTs {
			t.Fatalf("the transaction's rows arrived at %s and %s: cut in two", txn[0].CommitTs, e.CommitTs)
		}
	}

	for i, e := range evs {
		from, ok := live.ResumePoint(e.CommitTs)
		if !ok {
			continue
		}
		other := cfg
		other.ServerID = uint32(90 + i)
		again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), from)
		waitResolved(t, again)
		rest, _, _ := again.state()
		// What the first reader delivered up to the point, and what the
		// second delivers after it, rebuild the table.
		var upTo []source.Event
		for _, x := range evs {
			if len(rest) == 0 || x.CommitTs < rest[0].CommitTs {
				upTo = append(upTo, x)
			}
		}
		if got := rebuild(append(upTo, rest...)); !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("read again from the resume point at %s (row %s): rebuilt\n%q\nwant\n%q", e.CommitTs, keyText(e), got, want)
		}
	}
}

// inOneSession runs stmts in order on one connection (a transaction's
// statements must not go to different ones).
func inOneSession(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
