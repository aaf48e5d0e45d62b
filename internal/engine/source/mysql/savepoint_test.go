package mysql_test

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"strings"
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

// A transaction that changes a table that cannot roll back (MyISAM,
// MEMORY) has the server keep the rows a rollback to a savepoint undid
// in the binary log, followed by ROLLBACK TO: an ORM's nested
// transaction beside a MyISAM counter, a MEMORY cache. Those rows never
// were, and they do not arrive, also when the reader had sent them to
// the log in parts (more than 4,096 rows after the savepoint, or before
// it and after it); the savepoints nest, are set again under one name,
// and are released as the server keeps them. A transaction of a session
// writing statements that creates a temporary table ends in a ROLLBACK
// with the row changes it logged as rows before it: none of them
// arrives either. Before, every one of those rows reached the sink.
func TestRowsARollbackToASavepointUndidDoNotArrive(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,counter", nil,
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20))",
		"CREATE TABLE counter (id INT PRIMARY KEY, n INT) ENGINE=MyISAM", "INSERT INTO counter VALUES (1, 0)",
		"CREATE TABLE hits (id INT PRIMARY KEY, n INT) ENGINE=MEMORY", "INSERT INTO hits VALUES (1, 0)")
	dsn, log := up.dsn, up.log
	inOneSession(t, dsn, "BEGIN", "INSERT INTO orders VALUES (2, 'kept')", "SAVEPOINT s1",
		"UPDATE counter SET n = n + 1", "INSERT INTO orders VALUES (3, 'undone')", "ROLLBACK TO SAVEPOINT s1",
		"INSERT INTO orders VALUES (4, 'kept')", "COMMIT")
	// Nested, one name set again, one released; the table that cannot
	// roll back not replicated.
	inOneSession(t, dsn, "BEGIN", "UPDATE hits SET n = n + 1", "SAVEPOINT a", "INSERT INTO orders VALUES (5, 'undone')",
		"SAVEPOINT b", "INSERT INTO orders VALUES (6, 'undone')", "ROLLBACK TO SAVEPOINT a",
		"INSERT INTO orders VALUES (7, 'kept')", "SAVEPOINT c", "INSERT INTO orders VALUES (8, 'kept')", "SAVEPOINT c",
		"INSERT INTO orders VALUES (9, 'undone')", "ROLLBACK TO c", "SAVEPOINT d", "RELEASE SAVEPOINT d",
		"UPDATE orders SET note = 'changed' WHERE id = 2", "COMMIT")
	// Parts: 5,000 rows after the savepoint, undone; then 5,000 before
	// one and 5,000 after it, the second undone.
	inOneSession(t, dsn, "BEGIN", "INSERT INTO orders VALUES (10, 'kept')", "SAVEPOINT big", "UPDATE counter SET n = n + 1",
		"INSERT INTO orders SELECT 1000 + seq, 'undone' FROM seq_1_to_5000", "ROLLBACK TO SAVEPOINT big",
		"INSERT INTO orders VALUES (11, 'kept')", "COMMIT")
	inOneSession(t, dsn, "BEGIN", "INSERT INTO orders SELECT 10000 + seq, 'kept' FROM seq_1_to_5000", "SAVEPOINT p",
		"UPDATE hits SET n = n + 1", "INSERT INTO orders SELECT 20000 + seq, 'undone' FROM seq_1_to_5000",
		"DELETE FROM orders WHERE id BETWEEN 10001 AND 10010", "ROLLBACK TO p", "INSERT INTO orders VALUES (12, 'kept')", "COMMIT")
	// A session writing statements, a temporary table in its
	// transaction: BEGIN, the rows (UUID_SHORT makes the insert rows),
	// the CREATE TEMPORARY TABLE, ROLLBACK.
	inOneSession(t, dsn, "SET SESSION binlog_format = 'MIXED'", "BEGIN",
		"INSERT INTO orders VALUES (13, CONCAT('undone', UUID_SHORT() % 10))", "CREATE TEMPORARY TABLE scratch (i INT)",
		"UPDATE orders SET note = CONCAT('undone', UUID_SHORT() % 10) WHERE id = 2", "ROLLBACK")
	exec(t, dsn, "INSERT INTO orders VALUES (14, 'after')")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	for _, table := range []string{"orders", "counter"} {
		var of []source.Event
		for _, e := range evs {
			if e.Table == "shop."+table {
				of = append(of, e)
			}
		}
		if got, want := rebuild(of), selectAll(t, dsn, table); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s rebuilt from the binary log: %d rows, the table %d", table, len(got), len(want))
			for k, v := range got {
				if w, ok := want[k]; !ok || !slices.Equal(v, w) {
					t.Errorf("  %s: rebuilt %q, the table %q", k, v, w)
					break
				}
			}
		}
	}
	for _, e := range evs {
		if img := e.Image(); len(img) > 1 && strings.HasPrefix(img[1].Text, "undone") {
			t.Fatalf("a row a rollback undid arrived: %s %q", e.Op, img[1].Text)
		}
	}
	log.mu.Lock()
	truncated, parts := log.truncated, len(log.parts)
	log.mu.Unlock()
	if truncated < 2 {
		t.Fatalf("%d rollbacks took rows out of parts (%d parts), want 2: the rows after the savepoints did not go out in parts", truncated, parts)
	}
}
