package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// One server for the package's tests; each test has its own database.
var (
	serverOnce sync.Once
	server     *pgserver.Server
	serverErr  error
	dbsMu      sync.Mutex
	dbs        int // databases created
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		_ = server.Stop()
		_ = os.RemoveAll(filepath.Dir(server.Dir))
	}
	os.Exit(code)
}

// newDB starts the package's server if needed and creates a database
// with the given schema; it returns the server and a source URI base.
func newDB(t testing.TB, schema string) (*pgserver.Server, string) {
	t.Helper()
	return newDBWith(t, "", schema)
}

// newDBWith is newDB with options of CREATE DATABASE (an encoding, say).
func newDBWith(t testing.TB, options, schema string) (*pgserver.Server, string) {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cdcctl-pg-")
		if err != nil {
			serverErr = err
			return
		}
		server, serverErr = pgserver.Start(context.Background(), filepath.Join(dir, "data"), 0)
	})
	if serverErr != nil {
		t.Fatalf("start PostgreSQL: %v", serverErr)
	}
	ctx := context.Background()
	dbsMu.Lock()
	dbs++ // a benchmark runs its function more than once
	n := dbs
	dbsMu.Unlock()
	db := strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	db = fmt.Sprintf("%.50s_%d", db, n)
	if _, err := server.Psql(ctx, "postgres", "CREATE DATABASE "+db+" "+options); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Slots are the server's, not the database's: drop this
		// database's, ending a walsender that still holds one (on a
		// loaded machine it outlives the test's connection by a moment),
		// so that the server's slots do not run out.
		ctx := context.Background()
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			_, _ = server.Psql(ctx, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = '%s' AND active", db))
			_, _ = server.Psql(ctx, "postgres", fmt.Sprintf("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '%s' AND NOT active", db))
			out, err := server.Psql(ctx, "postgres", fmt.Sprintf("SELECT count(*) FROM pg_replication_slots WHERE database = '%s'", db))
			if err == nil && strings.TrimSpace(out) == "0" {
				return
			}
		}
		t.Errorf("replication slots of %s still there after 15 s", db)
	})
	if schema != "" {
		if _, err := server.Psql(ctx, db, schema); err != nil {
			t.Fatal(err)
		}
	}
	return server, server.DSN(db)
}

func psql(t testing.TB, s *pgserver.Server, dsn, sql string) {
	t.Helper()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if _, err := s.Psql(context.Background(), db, sql); err != nil {
		t.Fatal(err)
	}
}

// open prepares the upstream and opens a stream at the slot's start.
func open(t testing.TB, uri string) (*Stream, Config, Upstream) {
	t.Helper()
	cfg, err := ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	// The database's name is the test's own: tests run at once, and a
	// slot's name is the server's.
	cfg = cfg.WithNames(dbOf(uri))
	ctx := context.Background()
	up, err := Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]TableState{}
	for name, def := range up.Defs {
		tables[name] = TableState{Def: def, Nums: up.Nums[name]}
	}
	st, err := OpenStream(ctx, cfg, up.StartLSN, 0, tables, false, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, cfg, up
}

// txns reads until n transactions have come.
func txns(t *testing.T, st *Stream, n int) []*Txn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*Txn
	var last model.Ts
	var parts []source.Event // of the open transaction
	for len(out) < n {
		it, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("after %d transactions: %v", len(out), err)
		}
		if it.Erase != nil {
			kept := parts[:0]
			for _, e := range parts {
				if !slices.Contains(it.Erase, e.Table) {
					kept = append(kept, e)
				}
			}
			parts = kept
			continue
		}
		if it.Part != nil {
			if len(it.Part) > partRows {
				t.Fatalf("a part of %d rows: more than %d held in memory", len(it.Part), partRows)
			}
			parts = append(parts, it.Part...)
			continue
		}
		if it.Txn == nil {
			if len(parts) > 0 {
				t.Fatalf("a resolved position inside a transaction")
			}
			if it.Resolved <= last {
				t.Fatalf("resolved %v after %v", it.Resolved, last)
			}
			last = it.Resolved
			continue
		}
		if it.Txn.Ts <= last {
			t.Fatalf("transaction at %v after position %v", it.Txn.Ts, last)
		}
		last = it.Txn.Ts
		if it.Txn.Parted != (len(parts) > 0) {
			t.Fatalf("a transaction parted %v came after %d rows in parts", it.Txn.Parted, len(parts))
		}
		// Put the transaction together as the log holds it: schema
		// changes, then the rows in their order.
		var ddls, rows []source.Event
		for _, e := range it.Txn.Events {
			if e.Kind == source.KindDDL {
				ddls = append(ddls, e)
			} else {
				rows = append(rows, e)
			}
		}
		it.Txn.Events = append(append(ddls, parts...), rows...)
		parts = nil
		out = append(out, it.Txn)
	}
	return out
}

const everything = `CREATE TABLE public.everything (
	id int8 PRIMARY KEY, i2 int2, i4 int4 NOT NULL DEFAULT 0, n numeric(10,2), t text, vc varchar(16), b bool,
	ts timestamp, tstz timestamptz, d date, by bytea, j json, jb jsonb, u uuid, ai int4[], at text[], f8 float8)`

func TestEveryCommonTypeArrivesInItsTextForm(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, everything+"; SET TIME ZONE 'UTC'")
	st, _, up := open(t, dsn+"&tables=everything")
	def := up.Defs["public.everything"]
	wantTypes := "id:int8 i2:int2 i4:int4 n:numeric(10,2) t:text vc:varchar(16) b:bool ts:timestamp tstz:timestamptz d:date by:bytea j:json jb:jsonb u:uuid ai:_int4 at:_text f8:float8"
	var got []string
	for _, c := range def.Columns {
		got = append(got, c.Name+":"+c.Type)
	}
	if strings.Join(got, " ") != wantTypes {
		t.Fatalf("types:\n%s\nwant\n%s", strings.Join(got, " "), wantTypes)
	}
	if def.Columns[0].KeyPos != 1 || def.Columns[0].Nullable || def.Columns[2].Nullable || !def.Columns[1].Nullable {
		t.Fatalf("key and nullability: %+v", def.Columns[:3])
	}
	psql(t, srv, dsn, `SET TIME ZONE 'UTC';
INSERT INTO everything VALUES (1, -2, 3, 12.5, 'it''s', 'v', true, '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05+02', '2024-02-29',
	'\x00ff', '{"a": [1, 2]}', '{"b":1,  "a":2}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,3}', '{x,"y z",NULL}', 1.5);
INSERT INTO everything (id) VALUES (2);`)
	// psql -c runs its statements as one transaction.
	tx := txns(t, st, 1)
	if len(tx[0].Events) != 2 {
		t.Fatalf("%d rows, want 2", len(tx[0].Events))
	}
	row := tx[0].Events[0]
	want := []string{"1", "-2", "3", "12.50", "it's", "v", "t", "2024-01-02 03:04:05.123456", "2024-01-02 01:04:05+00", "2024-02-29",
		`\x00ff`, `{"a": [1, 2]}`, `{"a": 2, "b": 1}`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "{1,2,3}", `{x,"y z",NULL}`, "1.5"}
	if row.Op != source.OpInsert || textKey(&row) != "1" || row.Def != def || len(row.New) != len(want) {
		t.Fatalf("row %+v", row)
	}
	for i, w := range want {
		if row.New[i].Null || row.New[i].Text != w {
			t.Errorf("%s = %q (null %v), want %q", def.Columns[i].Name, row.New[i].Text, row.New[i].Null, w)
		}
	}
	nulls := tx[0].Events[1]
	for i, v := range nulls.New {
		if name := def.Columns[i].Name; (name == "id" || name == "i4") == v.Null {
			t.Errorf("row 2: %s null=%v", name, v.Null)
		}
	}
}

func TestUpdatesDeletesRollbacksAndKeyChanges(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE orders (region text, id int4, amount numeric, note text, PRIMARY KEY (id, region))`)
	st, _, up := open(t, dsn+"&tables=public.orders")
	if got := strings.Join(up.Defs["public.orders"].KeyNames(), ","); got != "id,region" {
		t.Fatalf("key %s, want the primary key's order id,region", got)
	}
	psql(t, srv, dsn, `INSERT INTO orders VALUES ('eu', 1, 10, 'a'), ('us', 2, 20, 'b')`)
	psql(t, srv, dsn, `BEGIN; INSERT INTO orders VALUES ('eu', 3, 30, 'never'); ROLLBACK`)
	psql(t, srv, dsn, `UPDATE orders SET amount = 11 WHERE id = 1`)
	psql(t, srv, dsn, `DELETE FROM orders WHERE id = 2`)
	psql(t, srv, dsn, `UPDATE orders SET id = 5 WHERE id = 1`)
	tx := txns(t, st, 4)
	var seen []string
	for _, x := range tx {
		var evs []string
		for _, e := range x.Events {
			if e.CommitTs != x.Ts || e.Kind != source.KindDML {
				t.Fatalf("event %+v in transaction at %v", e, x.Ts)
			}
			evs = append(evs, e.Op.String()+" "+textKey(&e))
		}
		seen = append(seen, strings.Join(evs, "; "))
	}
	want := []string{"INSERT 1,eu; INSERT 2,us", "UPDATE 1,eu", "DELETE 2,us", "DELETE 1,eu; INSERT 5,eu"}
	if strings.Join(seen, " | ") != strings.Join(want, " | ") {
		t.Fatalf("transactions:\n%s\nwant\n%s (the rolled-back insert must not appear)", strings.Join(seen, " | "), strings.Join(want, " | "))
	}
	upd := tx[1].Events[0]
	if upd.New[2].Text != "11" || upd.New[3].Text != "a" {
		t.Fatalf("update's new row %+v", upd.New)
	}
	del := tx[2].Events[0]
	if del.New != nil || del.Old[1].Text != "2" || del.Old[0].Text != "us" {
		t.Fatalf("delete's old row %+v", del.Old)
	}
}

func TestAnAddedColumnIsANewSchemaVersionBeforeTheRowsThatUseIt(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text)`)
	st, _, _ := open(t, dsn+"&tables=t")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a')`)
	psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN extra int8 DEFAULT 7`)
	psql(t, srv, dsn, `INSERT INTO t VALUES (2, 'b', 8)`)
	psql(t, srv, dsn, `UPDATE t SET v = 'c' WHERE id = 1`)
	tx := txns(t, st, 3)
	if len(tx[0].Events) != 1 || tx[0].Events[0].SchemaVersion != 0 || len(tx[0].Events[0].New) != 2 {
		t.Fatalf("first row %+v", tx[0].Events)
	}
	ddl, row := tx[1].Events[0], tx[1].Events[1]
	if ddl.Kind != source.KindDDL || ddl.SchemaVersion != 1 || ddl.CommitTs >= row.CommitTs || ddl.CommitTs <= tx[0].Ts {
		t.Fatalf("schema change %+v before row at %v", ddl, row.CommitTs)
	}
	if ddl.Statement != `ALTER TABLE "public"."t" ADD COLUMN "extra" int8 DEFAULT '7'` || len(ddl.Def.Columns) != 3 {
		t.Fatalf("statement %q, columns %d", ddl.Statement, len(ddl.Def.Columns))
	}
	if row.Def != ddl.Def || row.SchemaVersion != 1 || row.TableVersion != ddl.CommitTs || row.New[2].Text != "8" {
		t.Fatalf("row under the new version: %+v", row)
	}
	if later := tx[2].Events; len(later) != 1 || later[0].Def != ddl.Def || later[0].New[2].Text != "7" {
		t.Fatalf("a later row: %+v", later)
	}
}

// A table without a primary key, with REPLICA IDENTITY FULL: every row
// has the one empty key (one partition), and updates and deletes carry
// the whole old row, which is what tells equal rows apart downstream.
func TestAKeylessTableCarriesWholeRows(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE k (kind text, n int4); ALTER TABLE k REPLICA IDENTITY FULL`)
	st, _, up := open(t, dsn+"&tables=k")
	if kt := keyTypes(up.Defs["public.k"]); kt != model.NoKey {
		t.Fatalf("key types %q, want %q", kt, model.NoKey)
	}
	psql(t, srv, dsn, `INSERT INTO k VALUES ('a', 1), ('a', 1)`)
	psql(t, srv, dsn, `UPDATE k SET n = 2 WHERE ctid = (SELECT ctid FROM k LIMIT 1)`)
	psql(t, srv, dsn, `DELETE FROM k WHERE n = 1`)
	tx := txns(t, st, 3)
	ins, upd, del := tx[0].Events, tx[1].Events, tx[2].Events
	if len(ins) != 2 || ins[0].Key != "" || ins[1].Key != "" {
		t.Fatalf("inserts %+v", ins)
	}
	if len(upd) != 1 || upd[0].Op != source.OpUpdate || upd[0].Key != "" || upd[0].Old[1].Text != "1" || upd[0].New[1].Text != "2" {
		t.Fatalf("update %+v", upd)
	}
	if len(del) != 1 || del[0].Op != source.OpDelete || del[0].Old[0].Text != "a" || del[0].Old[1].Text != "1" {
		t.Fatalf("delete %+v", del)
	}
}

// A large transaction is not held in memory: its rows come out of the
// stream in parts as they arrive, at the position its commit gives them,
// under the schema each was written with.
func TestALargeTransactionComesInParts(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE big (id int8 PRIMARY KEY, v text)`)
	st, _, _ := open(t, dsn+"&tables=big")
	psql(t, srv, dsn, `BEGIN;
		INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 100000) g;
		ALTER TABLE big ADD COLUMN w int4;
		INSERT INTO big SELECT g, 'x', 1 FROM generate_series(100001, 110000) g;
		COMMIT`)
	tx := txns(t, st, 1)[0]
	if !tx.Parted || len(tx.Events) != 110001 {
		t.Fatalf("parted %v, %d events; want parts and a schema change with 110000 rows", tx.Parted, len(tx.Events))
	}
	ddl := tx.Events[0]
	if ddl.Kind != source.KindDDL || ddl.CommitTs >= tx.Ts || ddl.SchemaVersion != 1 {
		t.Fatalf("the schema change %+v, rows at %v", ddl, tx.Ts)
	}
	for i, e := range tx.Events[1:] {
		if textKey(&e) != fmt.Sprint(i+1) || e.CommitTs != tx.Ts {
			t.Fatalf("row %d: key %s at %v", i, textKey(&e), e.CommitTs)
		}
		if after := i >= 100000; after != (e.Def == ddl.Def) || after != (len(e.New) == 3) || after != (e.TableVersion == ddl.CommitTs) {
			t.Fatalf("row %d is under schema version %d (%d columns)", i, e.SchemaVersion, len(e.New))
		}
	}
}

// A reader that died without closing its connection leaves the slot held
// until PostgreSQL notices; the changefeed's next reader takes it over.
func TestAPullerTakesOverASlotStillHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	_, cfg, up := open(t, dsn+"&tables=t") // streaming, as a dead node's reader would seem to be
	cfg.Start = model.TsFromTime(time.Now())
	src, err := Open(cfg.URI(), source.Env{Changefeed: "test"})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := json.Marshal(position{LSN: up.StartLSN.String(), Ts: cfg.Start, Tables: map[string]TableState{"public.t": {Def: up.Defs["public.t"], Since: cfg.Start}}})
	log := &memLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Pull(ctx, start, log) }()
	psql(t, srv, dsn, `INSERT INTO t VALUES (1)`)
	deadline := time.Now().Add(30 * time.Second)
	for log.count() == 0 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the new reader got nothing: %v", <-done)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The transaction told the log its id (xid:commit LSN), for
	// transaction boundaries.
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.txnIDs) != 1 || !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(log.txnIDs[0]) {
		t.Fatalf("the transaction's id: %q", log.txnIDs)
	}
}

type memLog struct {
	mu     sync.Mutex
	evs    []source.Event
	txnIDs []string // the transactions' ids at the source, in order
	holds  map[string]model.Ts
}

// Hold records a table's hold; rows of it at or above are not read.
func (l *memLog) Hold(table string, at model.Ts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds == nil {
		l.holds = map[string]model.Ts{}
	}
	if h, ok := l.holds[table]; !ok || at < h {
		l.holds[table] = at
	}
}

func (l *memLog) Append(evs []source.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		// A transaction's id at the source is the log's, not a row.
		if e.Kind == source.KindTxn {
			l.txnIDs = append(l.txnIDs, e.Txn.SourceID)
		} else {
			l.evs = append(l.evs, e)
		}
	}
	return nil
}
func (l *memLog) AppendPart(evs []source.Event) error { return l.Append(evs) }

// TruncatePart is MySQL's (a rollback to a savepoint the binary log
// holds): PostgreSQL's stream carries no undone rows.
func (l *memLog) TruncatePart(int) error {
	return errors.New("the PostgreSQL source truncated a part")
}

// ErasePart drops the table's rows at the last position appended (the
// open transaction's parts).
func (l *memLog) ErasePart(table string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.evs) == 0 {
		return nil
	}
	ts := l.evs[len(l.evs)-1].CommitTs
	kept := l.evs[:0]
	for _, e := range l.evs {
		if e.Table != table || e.CommitTs != ts || e.Kind != source.KindDML {
			kept = append(kept, e)
		}
	}
	l.evs = kept
	return nil
}
func (l *memLog) Resolve(model.Ts) {}
func (l *memLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

// textKey is an event's key in text form ("1,eu"): events carry it
// encoded for routing.
func textKey(e *source.Event) string { return model.DecodeKey(keyTypes(e.Def), e.Key) }

// A TRUNCATE is a schema change of the tables it empties (same columns, a
// new version, its statement saying TRUNCATE), before the rows written
// after it; rows its transaction wrote before it are gone.
func TestATruncateIsASchemaChangeThatEmptiesTheTable(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text)`)
	st, _, _ := open(t, dsn+"&tables=t")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a')`)
	psql(t, srv, dsn, `BEGIN; INSERT INTO t VALUES (2, 'b'); TRUNCATE t; INSERT INTO t VALUES (3, 'c'); COMMIT`)
	tx := txns(t, st, 2)
	evs := tx[1].Events
	if len(evs) != 2 || !source.IsTruncate(&evs[0]) || evs[0].Statement != `TRUNCATE TABLE "public"."t"` {
		t.Fatalf("the TRUNCATE's transaction: %+v", evs)
	}
	ddl, row := evs[0], evs[1]
	if ddl.SchemaVersion != 1 || len(ddl.Def.Columns) != 2 || ddl.CommitTs >= row.CommitTs {
		t.Fatalf("the TRUNCATE %+v, then a row at %v", ddl, row.CommitTs)
	}
	if textKey(&row) != "3" || row.SchemaVersion != 1 || row.TableVersion != ddl.CommitTs {
		t.Fatalf("the row after it: %+v", row)
	}
}

// A transaction that sent rows of a table on as parts and then truncates
// it: the stream says to erase them, and the rows after the TRUNCATE stay.
func TestATruncateAfterPartsErasesThem(t *testing.T) {
	defer func(n int) { partRows = n }(partRows)
	partRows = 10
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text); CREATE TABLE u (id int4 PRIMARY KEY)`)
	st, _, _ := open(t, dsn+"&tables=t,u")
	psql(t, srv, dsn, `BEGIN;
		INSERT INTO t SELECT g, 'old' FROM generate_series(1, 50) g;
		INSERT INTO u SELECT g FROM generate_series(1, 30) g;
		TRUNCATE t;
		INSERT INTO t SELECT g, 'new' FROM generate_series(100, 104) g;
		COMMIT`)
	tx := txns(t, st, 1)[0]
	if !tx.Parted || len(tx.Events) != 1+30+5 || !source.IsTruncate(&tx.Events[0]) {
		t.Fatalf("parted %v, %d events; want the TRUNCATE, u's 30 rows and t's 5 after it", tx.Parted, len(tx.Events))
	}
	for _, e := range tx.Events[1:] {
		if e.Table == "public.t" && e.New[1].Text != "new" {
			t.Fatalf("a row the TRUNCATE erased: %+v", e)
		}
	}
}

// A column added with a DEFAULT and then rewritten (ALTER COLUMN TYPE)
// before the reader reads it: PostgreSQL no longer keeps the value the
// older rows got. Rather than write the new column without it (the older
// rows would read NULL downstream), the change goes on and the table is
// copied again (again.go), which gives the older rows their values; it
// used to be held until an operator copied it again. With snapshot=never,
// which copies nothing, the table is held, saying how to copy it again. A
// column added without a DEFAULT is NULL in older rows and goes on.
func TestAnAddedColumnWhoseOlderValuesAreLostCopiesTheTableAgain(t *testing.T) {
	t.Parallel()
	for _, never := range []bool{false, true} {
		srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text); CREATE TABLE u (id int4 PRIMARY KEY, v text)`)
		uri := dsn + "&tables=t,u"
		if never {
			uri += "&snapshot=never"
		}
		st, _, _ := open(t, uri)
		psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a'); INSERT INTO u VALUES (1, 'a')`)
		psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN extra int4 DEFAULT 7; ALTER TABLE t ALTER COLUMN extra TYPE int8; ALTER TABLE u ADD COLUMN note text`)
		psql(t, srv, dsn, `INSERT INTO t VALUES (2, 'b', 8); INSERT INTO u VALUES (2, 'b', 'n')`)
		// The ALTER's transaction comes too: the changefeed's event
		// trigger marked t's rewrite in it (rewrites.go).
		tx := txns(t, st, 3)
		holds := st.TakeHolds()
		var got []string
		var again []string
		for _, x := range tx[1:] {
			for _, e := range x.Events {
				got = append(got, e.Table+" "+e.Kind.String())
				if e.Kind == source.KindDDL && e.Statement != `ALTER TABLE "public"."u" ADD COLUMN "note" text` && e.Statement != `ALTER TABLE "public"."t" ADD COLUMN "extra" int8` {
					t.Errorf("statement %q", e.Statement)
				}
			}
			for _, a := range x.Again {
				again = append(again, a.Table)
			}
		}
		if never {
			if len(holds) != 1 || holds[0].Table != "public.t" || !strings.Contains(holds[0].Reason, "before column extra was added") || !strings.Contains(holds[0].Reason, "--copy-table public.t") {
				t.Fatalf("snapshot=never: holds %+v", holds)
			}
			// (The rewrite's mark names t; with snapshot=never nothing is
			// copied, and the reader warns: Source.markAgain.)
			if strings.Join(got, ", ") != "public.u DDL, public.u DML" || strings.Join(again, ",") != "public.t" {
				t.Fatalf("snapshot=never: after the changes: %v, marked again %v (public.t held, public.u going on)", got, again)
			}
			continue
		}
		// Twice: the rewrite's mark at the ALTER, and the column added,
		// whose older values that copy, begun before the stream knew the
		// column, does not carry.
		if len(holds) != 0 || strings.Join(got, ", ") != "public.t DDL, public.u DDL, public.t DML, public.u DML" || strings.Join(again, ",") != "public.t,public.t" {
			t.Fatalf("holds %+v; after the changes: %v, copied again %v", holds, got, again)
		}
	}
}

// A primary key dropped under REPLICA IDENTITY FULL: pgoutput's message
// flags every column either way, and the table kept its old key, so rows
// sharing its values collapsed downstream (a DELETE of one removing
// both). The table is held, saying why and what to do.
func TestAPrimaryKeyDroppedUnderReplicaIdentityFullHoldsTheTable(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text); ALTER TABLE t REPLICA IDENTITY FULL;
		CREATE TABLE r (a int4 PRIMARY KEY, b int4 NOT NULL); ALTER TABLE r REPLICA IDENTITY FULL;
		CREATE TABLE u (id int4 PRIMARY KEY)`)
	st, _, _ := open(t, dsn+"&tables=t,r,u")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a'); INSERT INTO r VALUES (1, 1)`)
	psql(t, srv, dsn, `ALTER TABLE t DROP CONSTRAINT t_pkey; ALTER TABLE r DROP CONSTRAINT r_pkey, ADD PRIMARY KEY (b)`)
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'dup'); INSERT INTO r VALUES (1, 2); INSERT INTO u VALUES (1)`)
	tx := txns(t, st, 2)
	holds := st.TakeHolds()
	if len(holds) == 2 && holds[1].Table == "public.r" && strings.Contains(holds[1].Reason, "replaced by one of other columns") {
		holds = holds[:1]
	}
	if len(holds) != 1 || holds[0].Table != "public.t" || !strings.Contains(holds[0].Reason, "primary key was dropped") {
		t.Fatalf("holds %+v", holds)
	}
	for _, e := range tx[1].Events {
		if e.Table == "public.t" || e.Table == "public.r" {
			t.Fatalf("a row of %s after its key was dropped or replaced: %+v", e.Table, e)
		}
	}
}

// reopen opens a stream of a slot another stream of the test just closed:
// the walsender may hold the slot a moment after the close, so an open
// refused as errSlotInUse is tried again for up to 15 s.
func reopen(open func() (*Stream, error)) (*Stream, error) {
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := open()
		if !errors.Is(err, errSlotInUse) || time.Now().After(deadline) {
			return st, err
		}
	}
}
