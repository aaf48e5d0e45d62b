package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// collected is an event log as a test sees it: what a puller appended,
// resolved and held.
type collected struct {
	mu       sync.Mutex
	events   []source.Event
	txnIDs   []string
	resolved model.Ts
	held     map[string]model.Ts
	// parts are the sizes of the parts appended; inPart, their rows not
	// resolved yet (a reader sees them after the transaction's schema
	// changes, which come with its commit).
	parts  []int
	inPart []source.Event
	// truncated counts the rollbacks that took rows out of parts.
	truncated int
	marks     []source.Event
}

func (c *collected) Append(evs []source.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range evs {
		if e.CommitTs <= c.resolved {
			return fmt.Errorf("an event at %s after resolving %s", e.CommitTs, c.resolved)
		}
	}
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			c.events = append(c.events, e)
		}
	}
	c.events = append(c.events, c.inPart...)
	c.inPart = nil
	for _, e := range evs {
		// A transaction's id at the source is the log's, not a row.
		switch e.Kind {
		case source.KindTxn:
			c.txnIDs = append(c.txnIDs, e.Txn.SourceID)
		case source.KindMark:
			// Watermarks, and tables to copy again: no row.
			c.marks = append(c.marks, e)
		case source.KindDDL:
		default:
			c.events = append(c.events, e)
		}
	}
	for _, e := range evs {
		c.resolved = max(c.resolved, e.CommitTs) // its highest, as the event log's
	}
	return nil
}
func (c *collected) AppendPart(rows []source.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range rows {
		if e.CommitTs <= c.resolved || len(c.inPart) > 0 && e.CommitTs != c.inPart[0].CommitTs {
			return fmt.Errorf("a part's row at %s after resolving %s", e.CommitTs, c.resolved)
		}
	}
	c.parts = append(c.parts, len(rows))
	c.inPart = append(c.inPart, rows...)
	return nil
}
func (c *collected) ErasePart(string) error { return nil }
func (c *collected) TruncatePart(keep int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if keep > len(c.inPart) {
		return fmt.Errorf("truncating a part of %d rows to %d", len(c.inPart), keep)
	}
	c.truncated++
	c.inPart = c.inPart[:keep]
	return nil
}
func (c *collected) Resolve(ts model.Ts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inPart) > 0 && c.inPart[0].CommitTs <= ts {
		c.events = append(c.events, c.inPart...)
		c.inPart = nil
	}
	c.resolved = max(c.resolved, ts)
}
func (c *collected) Hold(table string, at model.Ts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[string]model.Ts{}
	}
	c.held[table] = at
}

// lines are the log's events one a line, as tests compare them: "INSERT
// [1 a NULL]", and with ddls "DDL vN (column type, …): statement"; it
// fails the test if a table is held.
func (c *collected) lines(t *testing.T, ddls bool) string {
	t.Helper()
	evs, _, held := c.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	var out []string
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			if ddls {
				var cols []string
				for _, c := range e.Def.Columns {
					cols = append(cols, c.Name+" "+c.Type)
				}
				out = append(out, fmt.Sprintf("DDL v%d (%s): %s", e.SchemaVersion, strings.Join(cols, ", "), e.Statement))
			}
			continue
		}
		var vals []string
		for _, v := range e.Image() {
			vals = append(vals, map[bool]string{true: "NULL", false: v.Text}[v.Null])
		}
		out = append(out, e.Op.String()+" ["+strings.Join(vals, " ")+"]")
	}
	return strings.Join(out, "\n")
}

func (c *collected) state() ([]source.Event, model.Ts, map[string]model.Ts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events), c.resolved, maps.Clone(c.held)
}

// pull runs a puller from a resume point into a new log until the test
// ends.
func pull(t *testing.T, p *mysql.Puller, from source.Position) *collected {
	t.Helper()
	log := &collected{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Pull(ctx, from, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("pull: %v", err)
		}
	})
	return log
}

// waitResolved waits until the log is resolved past the server's clock
// now: every transaction committed before has arrived.
func waitResolved(t *testing.T, log *collected) {
	t.Helper()
	now := model.TsFromTimeMicros(time.Now())
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, r, _ := log.state(); r > now {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log was not resolved past %s within 30 s", now)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rebuild applies row changes in order: each key's last row, in text,
// by its first column (the tables' key).
func rebuild(evs []source.Event) map[string][]string {
	rows := map[string][]string{}
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			continue // a schema change: no row
		}
		switch e.Op {
		case source.OpDelete:
			delete(rows, keyText(e))
		default:
			vals := make([]string, len(e.New))
			for i, v := range e.New {
				vals[i] = v.Text
				if v.Null {
					vals[i] = "NULL"
				}
			}
			rows[vals[0]] = vals
		}
	}
	return rows
}

// keyText is the text of a row change's first column (the tables' key).
func keyText(e source.Event) string {
	if e.Op == source.OpDelete {
		return e.Old[0].Text
	}
	return e.New[0].Text
}

// selectAll reads a table as the server's text protocol returns it, by
// its first column.
func selectAll(t *testing.T, dsn, table string) map[string][]string {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("SET time_zone = '+00:00'"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("SELECT * FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	out := map[string][]string{}
	for rows.Next() {
		raw := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		vals := make([]string, len(cols))
		for i, r := range raw {
			vals[i] = string(r)
			if r == nil {
				vals[i] = "NULL"
			}
		}
		out[vals[0]] = vals
	}
	return out
}

// Rows written after a changefeed's first resume point arrive from the
// binary log in commit order, decoded with the catalog's schema into the
// server's own text form: inserts, updates, a key change, deletes, NULLs,
// unsigned, decimal, date-times, ENUM, SET, BIT and BLOB values; a rolled
// back transaction sends nothing. The table rebuilt from them equals the
// table read back; ticks resolve an idle stream; and read again from the
// first resume point, every transaction gets the same position.
func TestRowsArriveFromTheBinaryLogAsTheServerShowsThem(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, `CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20), amount DECIMAL(10,2), qty INT UNSIGNED, big BIGINT UNSIGNED,
		at DATETIME(3), day DATE, kind ENUM('a','b c'), tags SET('x','y','z'), flag BIT(3), data BLOB, f DOUBLE, small TINYINT UNSIGNED)`,
		"CREATE TABLE other (id INT PRIMARY KEY)")
	cfg := parse(t, uri(srv, "root", "orders"))
	ctx := context.Background()
	if _, _, err := mysql.Preflight(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	first, err := mysql.Begin(ctx, cfg, model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	log := pull(t, mysql.NewPuller(cfg, "cf", "mariadb", nil), first)
	exec(t, dsn,
		`INSERT INTO orders VALUES (1, 'one', 12.50, 4000000000, 18446744073709551615, '2024-02-29 23:59:59.123', '2024-01-01', 'b c', 'x,z', b'101', x'00ff10', 1.5, 255)`,
		`INSERT INTO orders (id, note) VALUES (2, NULL), (3, 'three')`,
		"INSERT INTO other VALUES (1)",
		"UPDATE orders SET note = 'uno', amount = -0.01 WHERE id = 1",
		"UPDATE orders SET id = 30 WHERE id = 3",
		"DELETE FROM orders WHERE id = 2",
		"BEGIN", "INSERT INTO orders (id) VALUES (99)", "ROLLBACK",
		"INSERT INTO orders (id, note) VALUES (4, 'four')")
	waitResolved(t, log)
	evs, _, held := log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	var ops []string
	for _, e := range evs {
		if e.Table != "shop.orders" {
			t.Fatalf("an event of %s, which the changefeed does not replicate", e.Table)
		}
		// The key is routed encoded, as partitions' bounds are.
		if want, _ := model.EncodeKeyValues("int8", []string{keyText(e)}); e.Key != want {
			t.Fatalf("%s of %s: key %q, want %q", e.Op, keyText(e), e.Key, want)
		}
		ops = append(ops, e.Op.String()+":"+keyText(e))
	}
	if got := strings.Join(ops, " "); got != "INSERT:1 INSERT:2 INSERT:3 UPDATE:1 DELETE:3 INSERT:30 DELETE:2 INSERT:4" {
		t.Fatalf("the changes in order: %s", got)
	}
	// Each transaction with rows of ours tells the log its GTID
	// (MariaDB's domain-server-sequence), for transaction boundaries.
	log.mu.Lock()
	ids := slices.Clone(log.txnIDs)
	log.mu.Unlock()
	if len(ids) != 6 || !regexp.MustCompile(`^0-\d+-\d+$`).MatchString(ids[0]) || ids[0] == ids[5] {
		t.Fatalf("the transactions' ids: %q, want six GTIDs", ids)
	}
	got, want := rebuild(evs), selectAll(t, dsn, "orders")
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt from the binary log:\n%q\nread back:\n%q", got, want)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].CommitTs < evs[i-1].CommitTs {
			t.Fatalf("positions go back: %s after %s", evs[i].CommitTs, evs[i-1].CommitTs)
		}
	}

	// Idle: ticks resolve the stream past the clock.
	waitResolved(t, log)

	// Read again from the first resume point: the same positions.
	// (Under another server id: the server refuses a second connection
	// under the first's while it reads.)
	other := cfg
	other.ServerID = 77
	again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
	waitResolved(t, again)
	evs2, _, _ := again.state()
	if len(evs2) < len(evs) {
		t.Fatalf("read again: %d events, first %d", len(evs2), len(evs))
	}
	for i := range evs {
		if evs2[i].CommitTs != evs[i].CommitTs || evs2[i].Key != evs[i].Key || evs2[i].Op != evs[i].Op {
			t.Fatalf("read again, event %d is %s %s at %s; first %s %s at %s", i, evs2[i].Op, evs2[i].Key, evs2[i].CommitTs, evs[i].Op, evs[i].Key, evs[i].CommitTs)
		}
	}
}

// Schema changes of a replicated table are followed by a reader that
// keeps up: an added column, a dropped one and a changed type each come
// as a schema change event at its own position before the first row that
// has the new schema, and every row is decoded with its own. A TRUNCATE
// goes on as one (a new table version no earlier row survives). A
// rename holds its table; the others go on. Read again from the first resume point, after all the changes
// (the catalog shows only the last schema), every row is decoded with its
// own schema, from the binary log's description of it, at the same
// positions.
func TestSchemaChangesAreFollowedAndARenameHoldsItsTable(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note TEXT)", "CREATE TABLE items (id BIGINT PRIMARY KEY)")
	cfg := parse(t, uri(srv, "root", "orders,items"))
	first, err := mysql.Begin(context.Background(), cfg, model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	log := pull(t, mysql.NewPuller(cfg, "cf", "mariadb", nil), first)
	// Each change read before the next is made: the reader keeps up.
	for _, step := range [][]string{
		{"INSERT INTO orders VALUES (1, 'a')", "ALTER TABLE orders ADD COLUMN extra INT", "INSERT INTO orders VALUES (2, 'b', 5)", "UPDATE orders SET extra = 7 WHERE id = 1"},
		{"ALTER TABLE orders DROP COLUMN note", "INSERT INTO orders VALUES (3, 9)"},
		{"ALTER TABLE orders MODIFY extra BIGINT", "INSERT INTO orders VALUES (4, 9000000000)"},
		{"TRUNCATE TABLE `shop`.orders", "INSERT INTO orders VALUES (5, 1)"},
		{"INSERT INTO items VALUES (7)", "RENAME TABLE items TO items_v2", "INSERT INTO items_v2 VALUES (8)"},
	} {
		exec(t, dsn, step...)
		waitResolved(t, log)
	}
	evs, _, held := log.state()
	if _, ok := held["shop.items"]; !ok || len(held) != 1 {
		t.Fatalf("held: %v, want shop.items (renamed) only", held)
	}
	var got []string
	var last model.Ts
	for _, e := range evs {
		if e.CommitTs < last || (e.Kind == source.KindDDL && e.CommitTs == last) {
			t.Fatalf("%s of %s at %s after %s: a schema change needs a position of its own", e.Kind, e.Table, e.CommitTs, last)
		}
		last = e.CommitTs
		if e.Kind == source.KindDDL {
			var cols []string
			for _, c := range e.Def.Columns {
				cols = append(cols, c.Name+" "+c.Type)
			}
			what := "DDL"
			if source.IsTruncate(&e) {
				what = "TRUNCATE"
			}
			got = append(got, fmt.Sprintf("%s v%d (%s)", what, e.SchemaVersion, strings.Join(cols, ", ")))
			continue
		}
		var vals []string
		for _, v := range e.Image() {
			vals = append(vals, v.Text)
		}
		got = append(got, fmt.Sprintf("%s %s v%d [%s]", e.Op, e.Table, e.SchemaVersion, strings.Join(vals, " ")))
	}
	want := []string{
		"INSERT shop.orders v0 [1 a]",
		"DDL v1 (id bigint(20), note text, extra int(11))",
		"INSERT shop.orders v1 [2 b 5]",
		"UPDATE shop.orders v1 [1 a 7]",
		"DDL v2 (id bigint(20), extra int(11))",
		"INSERT shop.orders v2 [3 9]",
		"DDL v3 (id bigint(20), extra bigint(20))",
		"INSERT shop.orders v3 [4 9000000000]",
		"TRUNCATE v4 (id bigint(20), extra bigint(20))",
		"INSERT shop.orders v4 [5 1]",
		"INSERT shop.items v0 [7]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Read again from the first resume point, behind all the changes
	// (the catalog shows only the last schema): each row is decoded with
	// its own schema, from its table map (binlog_row_metadata=FULL), as
	// the first time.
	other := cfg
	other.ServerID = 78
	again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
	waitResolved(t, again)
	evs2, _, held2 := again.state()
	if _, ok := held2["shop.orders"]; ok {
		t.Fatalf("read behind its schema changes, orders is held: %v", held2)
	}
	rows := func(evs []source.Event) []string {
		var out []string
		for _, e := range evs {
			if e.Kind == source.KindDDL {
				out = append(out, fmt.Sprintf("DDL v%d of %d columns at %s", e.SchemaVersion, len(e.Def.Columns), e.CommitTs))
				continue
			}
			var vals []string
			for _, v := range e.Image() {
				vals = append(vals, v.Text)
			}
			out = append(out, fmt.Sprintf("%s %s v%d [%s] at %s", e.Op, e.Table, e.SchemaVersion, strings.Join(vals, " "), e.CommitTs))
		}
		return out
	}
	if a, b := strings.Join(rows(evs2), "\n"), strings.Join(rows(evs), "\n"); a != b {
		t.Fatalf("read behind the changes:\n%s\nfirst:\n%s", a, b)
	}
}

// A second reader under a changefeed's server id takes over (the server
// ends the older connection, which says so); a changefeed whose binary
// log was purged while its reader was stopped stops with that reason and
// what to do, never going on from elsewhere.
func TestAReaderTakesOverAndAPurgedPositionStopsIt(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY)")
	cfg := parse(t, uri(srv, "root", "orders"))
	first, err := mysql.Begin(context.Background(), cfg, model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	old := &collected{}
	oldDone := make(chan error, 1)
	go func() { oldDone <- mysql.NewPuller(cfg, "cf", "mariadb", nil).Pull(context.Background(), first, old) }()
	waitResolved(t, old)
	// The new one (the changefeed's reader placed elsewhere) takes over.
	taken := pull(t, mysql.NewPuller(cfg, "cf", "mariadb", nil), first)
	select {
	case err := <-oldDone:
		if err == nil || !strings.Contains(err.Error(), "another reader connected under server id") || !strings.Contains(err.Error(), "took over") {
			t.Fatalf("the replaced reader ended with: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the older reader still reads 30 s after another took over")
	}
	exec(t, dsn, "INSERT INTO orders VALUES (1)")
	waitResolved(t, taken)
	if evs, _, _ := taken.state(); len(evs) != 1 {
		t.Fatalf("the reader that took over read %d rows, want 1", len(evs))
	}

	// Before a resume (and an update's new connection), the server is
	// asked for the dump as the reader will ask: from a position it
	// holds, nothing to say.
	probe := uri(srv, "root", "orders") + "&server-id=99"
	if err := mysql.Resumable(context.Background(), probe, first); err != nil {
		t.Fatalf("a position the server holds: %v", err)
	}

	// The first binary log purged: a reader from the first position stops.
	exec(t, dsn, "FLUSH BINARY LOGS", "INSERT INTO orders VALUES (2)")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var last string
	var ignored sql.NullString
	var pos uint32
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&last, &pos, &ignored, &ignored); err != nil {
		t.Fatal(err)
	}
	// The server keeps a file a reader still has open (with a warning):
	// purge until the first is gone.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := db.Exec("PURGE BINARY LOGS TO '" + last + "'"); err != nil {
			t.Fatalf("purge: %v", err)
		}
		var name string
		var size int64
		if err := db.QueryRow("SHOW BINARY LOGS").Scan(&name, &size); err == nil && name == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first binary log is still on the server after 30 s of purging")
		}
	}
	other := cfg
	other.ServerID = 99
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = mysql.NewPuller(other, "cf", "mariadb", nil).Pull(ctx, first, &collected{})
	if !errors.Is(err, mysql.ErrPurged) || !strings.Contains(err.Error(), "cdcctl changefeed resnapshot") {
		t.Fatalf("a reader from a purged position: %v", err)
	}
	t.Log(err)
	// And asked before it starts, the same answer, unresumable.
	err = mysql.Resumable(ctx, probe, first)
	if !errors.Is(err, mysql.ErrPurged) || !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "cdcctl changefeed resnapshot") {
		t.Fatalf("asked whether a purged position can resume: %v", err)
	}
}

// upstream is a private MariaDB with its binary log on, and a puller of
// some of its tables from where the log ended when it was started.
type upstream struct {
	srv   *mysqlserver.Server
	dsn   string // of database shop
	cfg   mysql.Config
	first source.Position
	p     *mysql.Puller
	log   *collected
}

// followFrom starts MariaDB (with args), runs stmts in database shop,
// and pulls tables (as tables= names them) from there.
func followFrom(t *testing.T, tables string, args []string, stmts ...string) upstream {
	t.Helper()
	var u upstream
	u.srv, u.dsn = mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: args})
	exec(t, u.dsn, stmts...)
	u.cfg = parse(t, uri(u.srv, "root", tables))
	var err error
	if u.first, err = mysql.Begin(context.Background(), u.cfg, model.TsFromTime(time.Now())); err != nil {
		t.Fatal(err)
	}
	u.p = mysql.NewPuller(u.cfg, "cf", "mariadb", nil)
	u.log = pull(t, u.p, u.first)
	return u
}
