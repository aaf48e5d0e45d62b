package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	gomysqldriver "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// XA transactions arrive at their outcome: one prepared, then committed
// after another transaction committed, comes after that one, at its XA
// COMMIT; one prepared and rolled back never arrives (read at its
// prepare, as before, its row stayed in the sink); one committed in one
// phase is an ordinary transaction. A reader started again from the
// resume point the first reader gave while the prepared one waited reads
// its prepare again and delivers its rows at the same position.
func TestXATransactionsArriveAtTheirOutcome(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", nil, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20), qty INT)")
	dsn, cfg, live, log := up.dsn, up.cfg, up.p, up.log
	exec(t, dsn, "INSERT INTO orders VALUES (1, 'one', 1)")
	exec(t, dsn, "XA START 'x1'", "INSERT INTO orders VALUES (2, 'two', 2)", "UPDATE orders SET qty = 5 WHERE id = 1", "XA END 'x1'", "XA PREPARE 'x1'")
	exec(t, dsn, "INSERT INTO orders VALUES (3, 'three', 3)")
	waitResolved(t, log)
	_, resolved, _ := log.state()
	mid, ok := live.ResumePoint(resolved)
	if !ok {
		t.Fatal("no resume point while x1 waits")
	}
	xaOutcome(t, dsn, "XA COMMIT 'x1'")
	exec(t, dsn, "XA START 'x2'", "INSERT INTO orders VALUES (4, 'four', 4)", "XA END 'x2'", "XA PREPARE 'x2'")
	xaOutcome(t, dsn, "XA ROLLBACK 'x2'")
	exec(t, dsn, "XA START 'x3'", "INSERT INTO orders VALUES (5, 'five', 5)", "XA END 'x3'", "XA COMMIT 'x3' ONE PHASE")
	exec(t, dsn, "INSERT INTO orders VALUES (6, 'six', 6)")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	ops := func(evs []source.Event) string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Op.String()+":"+keyText(e))
		}
		return strings.Join(out, " ")
	}
	if got := ops(evs); got != "INSERT:1 INSERT:3 INSERT:2 UPDATE:1 INSERT:5 INSERT:6" {
		t.Fatalf("the changes in order: %s", got)
	}
	if evs[2].CommitTs != evs[3].CommitTs || evs[2].CommitTs <= evs[1].CommitTs {
		t.Fatalf("x1's rows at %s and %s, after %s: one position, after the transaction that committed first", evs[2].CommitTs, evs[3].CommitTs, evs[1].CommitTs)
	}
	if got, want := rebuild(evs), selectAll(t, dsn, "orders"); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt from the binary log:\n%q\nread back:\n%q", got, want)
	}

	other := cfg
	other.ServerID = 78
	again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), mid)
	waitResolved(t, again)
	evs2, _, _ := again.state()
	i := slices.IndexFunc(evs2, func(e source.Event) bool { return e.Op == source.OpInsert && keyText(e) == "2" })
	if i < 0 || ops(evs2[i:i+2]) != "INSERT:2 UPDATE:1" || evs2[i].CommitTs != evs[2].CommitTs {
		t.Fatalf("read again from the resume point given while x1 waited: %s", ops(evs2))
	}
}

// A changefeed is not created while an XA transaction is prepared (its
// rows are before the changefeed's first position): the preflight says
// so and what to do, and passes once it is rolled back; a changefeed's
// status warns while one is prepared.
func TestThePreflightRefusesWhileAnXATransactionIsPrepared(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20))")
	exec(t, dsn, "XA START 'pending'", "INSERT INTO orders VALUES (1, 'one')", "XA END 'pending'", "XA PREPARE 'pending'")
	cfg := parse(t, uri(srv, "root", "orders"))
	if _, _, err := mysql.Preflight(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "1 XA transaction(s) prepared") || !strings.Contains(err.Error(), "XA ROLLBACK") {
		t.Fatalf("the preflight with an XA transaction prepared: %v", err)
	}
	// A running changefeed's status warns while one is prepared: its
	// resume point cannot pass it.
	st, err := mysql.Inspect(context.Background(), uri(srv, "root", "orders"), nil)
	if err != nil || len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], `XA transaction(s) "pending" prepared`) || !strings.Contains(st.Warnings[0], "resume point stays before") {
		t.Fatalf("the status while an XA transaction is prepared: %+v, %v", st, err)
	}
	xaOutcome(t, dsn, "XA ROLLBACK 'pending'")
	if _, _, err := mysql.Preflight(context.Background(), cfg); err != nil {
		t.Fatalf("the preflight once it is rolled back: %v", err)
	}
	if st, err := mysql.Inspect(context.Background(), uri(srv, "root", "orders"), nil); err != nil || len(st.Warnings) != 0 {
		t.Fatalf("the status once it is rolled back: %+v, %v", st, err)
	}
}

// xaOutcome commits or rolls back a transaction another connection
// prepared and closed. The server detaches a prepared transaction from
// its connection after that connection's close returned: until then
// another connection does not know it (Error 1397, XAER_NOTA; seen once
// on a loaded machine), so the statement is tried again for a while.
func xaOutcome(t *testing.T, dsn, stmt string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for began := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		_, err := db.Exec(stmt)
		if err == nil {
			return
		}
		var me *gomysqldriver.MySQLError
		if !errors.As(err, &me) || me.Number != 1397 || time.Since(began) > 10*time.Second {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// A schema change the reader meets at an XA transaction's first row (an
// ALTER the history does not apply, followed from the catalog) reaches
// the sink at the transaction's outcome, committed or rolled back: the
// rows after it carry its version. It was lost with the prepared
// transaction's state.
func TestASchemaChangeMetInsideAnXATransactionIsWritten(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders,other", nil, "CREATE TABLE orders (id BIGINT PRIMARY KEY, a INT)", "CREATE TABLE other (id BIGINT PRIMARY KEY, a INT)")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1, 1)", "INSERT INTO other VALUES (1, 1)",
		"ALTER TABLE orders ADD COLUMN g INT AS (id + 1)", "ALTER TABLE other ADD COLUMN g INT AS (id + 1)")
	exec(t, up.dsn, "XA START 'x1'", "INSERT INTO orders (id, a) VALUES (2, 2)", "XA END 'x1'", "XA PREPARE 'x1'")
	// Another transaction of the table commits while x1 waits: its row
	// carries the new schema, and comes after the change.
	exec(t, up.dsn, "INSERT INTO orders (id, a) VALUES (9, 9)")
	xaOutcome(t, up.dsn, "XA COMMIT 'x1'")
	exec(t, up.dsn, "XA START 'x2'", "INSERT INTO other (id, a) VALUES (2, 2)", "XA END 'x2'", "XA PREPARE 'x2'")
	xaOutcome(t, up.dsn, "XA ROLLBACK 'x2'")
	exec(t, up.dsn, "INSERT INTO orders (id, a) VALUES (3, 3)", "INSERT INTO other (id, a) VALUES (3, 3)")
	waitResolved(t, up.log)
	evs, _, held := up.log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	for _, c := range []struct{ table, key string }{{"shop.orders", "9"}, {"shop.orders", "3"}, {"shop.other", "3"}} {
		table := c.table
		ddl := slices.IndexFunc(evs, func(e source.Event) bool { return e.Kind == source.KindDDL && e.Table == table })
		last := slices.IndexFunc(evs, func(e source.Event) bool { return e.Table == table && e.Op == source.OpInsert && keyText(e) == c.key })
		if ddl < 0 || last < ddl || evs[last].SchemaVersion != evs[ddl].SchemaVersion {
			t.Fatalf("%s: its schema change at %d, its last row at %d (schema version %d): the change must be written before the rows that carry it", table, ddl, last, evs[max(last, 0)].SchemaVersion)
		}
	}
}
