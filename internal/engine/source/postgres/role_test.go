package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A user with REPLICATION that owns its tables and may create in the
// database (for the publication), not a superuser, is all a changefeed
// needs: it creates the publication and slot, copies the
// table between watermarks and resolves from ticks, both written with
// pg_logical_emit_message.
func TestAReplicationUserThatIsNotASuperuserReplicates(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE ROLE cdc LOGIN REPLICATION;
		CREATE TABLE t (id int4 PRIMARY KEY, v text);
		ALTER TABLE t OWNER TO cdc;
		DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cdc', current_database()); END $$;
		INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g`)
	rig := startCopyRig(t, strings.Replace(dsn, "postgres@", "cdc@", 1)+"&tables=t", "role")
	p := rig.run(model.Span{Table: "public.t", Key: "int4"}, rig.start, model.CopyProgress{})
	psql(t, srv, dsn, `INSERT INTO t VALUES (1000, 'after')`)
	p.waitDone(t)
	for deadline := time.Now().Add(30 * time.Second); !p.has("1000"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the row written after the changefeed began did not arrive")
		}
	}
	keys := map[string]bool{}
	for _, e := range p.stopped(t) {
		keys[e.Key] = true
	}
	if len(keys) != 101 {
		t.Fatalf("%d rows arrived, want 101", len(keys))
	}
	// Such a user cannot create the event trigger that sees a column
	// rewritten under its own type (rewrites.go): changefeed get says so,
	// and what to do.
	st, err := Inspect(context.Background(), rig.src.cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(st.Warnings, "\n"); !strings.Contains(w, "no event trigger "+rewriteTrigger(rig.src.cfg)) || !strings.Contains(w, "changefeed update --copy-table") {
		t.Fatalf("warnings: %q", st.Warnings)
	}
	rig.stop(t)
}

// A role's or a database's statement_timeout and
// idle_in_transaction_session_timeout do not reach the source's
// sessions: they would cancel a chunk's read, the stream, and a table
// without a key's copy (begun again, its rows sent twice). Its sessions
// start with both off, and its stored URI does not keep them.
func TestTheRolesTimeoutsReachNoSessionOfTheSource(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE ROLE cdc_limits LOGIN REPLICATION;
		ALTER ROLE cdc_limits SET statement_timeout = '1ms';
		ALTER ROLE cdc_limits SET idle_in_transaction_session_timeout = '1ms';
		CREATE TABLE t (id int4 PRIMARY KEY, v text);
		ALTER TABLE t OWNER TO cdc_limits;
		DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cdc_limits', current_database()); END $$;
		INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g`)
	cfg, err := ParseURI(strings.Replace(dsn, "postgres@", "cdc_limits@", 1) + "&tables=t")
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.URI(); strings.Contains(u, "statement_timeout") || strings.Contains(u, "idle_in_transaction") {
		t.Fatalf("the stored URI keeps the limits: %s", u)
	}
	// The operator's own, in options=, stays theirs.
	own, err := ParseURI(strings.Replace(dsn, "postgres@", "cdc_limits@", 1) + "&tables=t&options=-c%20statement_timeout%3D5min")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(own.ConnString, "statement_timeout=0") {
		t.Fatalf("options= sets statement_timeout, and the source's is added over it: %s", own.ConnString)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, name := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil || v != "0" {
			t.Errorf("%s in the source's session: %q, %v", name, v, err)
		}
	}
	// Without them, the role's session has the role's.
	plain, err := pgx.Connect(ctx, strings.Replace(dsn, "postgres@", "cdc_limits@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	var v string
	if err := plain.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&v); err != nil || v != "1ms" {
		t.Fatalf("the role's own setting: %q, %v", v, err)
	}
}

// A role's idle_session_timeout (PostgreSQL 14 on) does not reach the
// stream's catalog session either, idle while nothing needs it: it ended
// the stream at its next tick (opened again from its resume point, and
// again at the next idle spell), or held the next table whose columns
// changed, for an operator's resume ("its new columns cannot be read:
// terminating connection due to idle-session timeout"). The startup
// message cannot turn it off (a server before 14 refuses a setting it
// does not know): the session does once connected.
func TestTheRolesIdleSessionTimeoutEndsNoSessionOfTheSource(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE ROLE cdc_idle LOGIN REPLICATION;
		CREATE TABLE t (id int4 PRIMARY KEY, v text);
		ALTER TABLE t OWNER TO cdc_idle;
		DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cdc_idle', current_database()); END $$`)
	out, err := srv.Psql(context.Background(), "postgres", "SHOW server_version_num")
	if v, _ := strconv.Atoi(strings.TrimSpace(out)); err != nil || v < 140000 {
		t.Skipf("idle_session_timeout is PostgreSQL 14's (server_version_num %q, %v)", strings.TrimSpace(out), err)
	}
	psql(t, srv, dsn, `ALTER ROLE cdc_idle SET idle_session_timeout = '500ms'`)
	st, _, _ := open(t, strings.Replace(dsn, "postgres@", "cdc_idle@", 1)+"&tables=t")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a')`)
	txns(t, st, 1)
	time.Sleep(1500 * time.Millisecond)
	// A type the stream has not met, whose name it reads from the
	// catalog: the row arrives, nothing held (txns fails the test if the
	// stream ends).
	psql(t, srv, dsn, `CREATE TYPE mood AS ENUM ('ok', 'sad'); ALTER TABLE t ADD COLUMN m mood; INSERT INTO t VALUES (2, 'b', 'ok')`)
	got := txns(t, st, 1)[0]
	if holds := st.TakeHolds(); len(holds) != 0 {
		t.Fatalf("held: %+v", holds)
	}
	var row []string
	for _, e := range got.Events {
		if e.Kind != source.KindDDL {
			for _, v := range e.New {
				row = append(row, v.Text)
			}
		}
	}
	if strings.Join(row, " ") != "2 b ok" {
		t.Fatalf("the row after the idle spell: %q", row)
	}
	// The operator's own, given with the connection, stays theirs.
	ctx := context.Background()
	cat, err := openCatalog(ctx, strings.Replace(dsn, "postgres@", "cdc_idle@", 1)+"&options=-c%20idle_session_timeout%3D7min")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var v string
	if err := cat.conn.QueryRow(ctx, "SHOW idle_session_timeout").Scan(&v); err != nil || v != "7min" {
		t.Fatalf("the URI's own idle_session_timeout: %q, %v", v, err)
	}
}

// The catalog's session ended by the server (an administrator's
// pg_terminate_backend, a restart) as the stream meets a table whose
// columns changed: the stream ends, to be opened again from its resume
// point, and the table is not held, which would wait for an operator's
// resume. (The wait for the transaction to be visible meets the closed
// session first; the columns' reads after it, which hold a table they
// cannot read, end the stream too when the session is closed.)
func TestACatalogSessionEndedUpstreamHoldsNoTable(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v text)`)
	st, _, _ := open(t, dsn+"&tables=t")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1, 'a')`)
	txns(t, st, 1)
	// At once, while no tick is due: the relation comes first.
	psql(t, srv, dsn, fmt.Sprintf(`SELECT pg_terminate_backend(%d); CREATE TYPE mood AS ENUM ('ok'); ALTER TABLE t ADD COLUMN m mood; INSERT INTO t VALUES (2, 'b', 'ok')`, st.cat.conn.PgConn().PID()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for err == nil {
		_, err = st.Next(ctx)
		if holds := st.TakeHolds(); len(holds) != 0 {
			t.Fatalf("held: %+v", holds)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the stream did not end: %v", err)
	}
	t.Logf("the stream ends: %v", err)
}
