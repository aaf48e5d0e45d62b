package postgres

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// The stream can hand out a transaction before its backend has finished
// committing it: PostgreSQL flushes the commit record (which the
// walsender then decodes), and only after that takes the transaction
// out of the running ones, which is what other sessions' snapshots look
// at. Here the gap is held open: every commit waits for a synchronous
// standby that is not there, after its flush. A column added with a
// DEFAULT in the same transaction as a row must still be read with the
// value older rows have in it, not looked up in a catalog that does not
// show it yet (it did: the column "had been dropped since", and older
// rows read NULL downstream instead of 7; on a loaded machine a whole
// test run met it).
func TestASchemaChangeIsLookedUpOnceItsTransactionIsVisible(t *testing.T) {
	t.Parallel()
	st, release := commitInTheGap(t, addColumnAndRow)
	got := nextTxn(st)
	var early *next
	select {
	case n := <-got:
		early = &n
	case <-time.After(2 * time.Second):
		// The reader has had the time to meet it.
	}
	release()
	n := early
	if n == nil {
		m := <-got
		n = &m
	}
	if n.err != nil {
		t.Fatal(n.err)
	}
	evs := n.it.Txn.Events
	if len(evs) != 2 || evs[0].Kind != source.KindDDL || evs[1].Kind != source.KindDML {
		t.Fatalf("the transaction: %+v", evs)
	}
	if want := `ALTER TABLE "public"."t" ADD COLUMN "extra" int4 DEFAULT '7'`; evs[0].Statement != want {
		t.Fatalf("the schema change read while its transaction was not visible yet: %q, want %q (older rows keep 7, not NULL)", evs[0].Statement, want)
	}
	if early != nil {
		t.Fatalf("the transaction was handed out before others could see it")
	}
}

// A transaction that stays invisible (its synchronous standby never
// answers) does not hold the reader for ever without a word: after its
// wait the stream ends with why, and the reader starts again.
func TestATransactionThatStaysInvisibleEndsTheStreamWithWhy(t *testing.T) {
	t.Parallel()
	st, release := commitInTheGap(t, addColumnAndRow)
	defer release()
	st.visibleWait = 2 * time.Second
	n := <-nextTxn(st)
	if n.err == nil || !strings.Contains(n.err.Error(), "is in the WAL but not visible to other sessions after 2s (a synchronous standby that does not answer?)") {
		t.Fatalf("the stream on a transaction that stays invisible: %+v, %v", n.it, n.err)
	}
}

// addColumnAndRow adds a column with a default and writes a row in one
// transaction.
const addColumnAndRow = `BEGIN; ALTER TABLE t ADD COLUMN extra int4 DEFAULT 7; INSERT INTO t VALUES (2, 'b', 8); COMMIT`

// commitInTheGap starts a PostgreSQL of its own (the gap is opened for
// every session of it) with table t, opens a stream on it, and commits
// txn (addColumnAndRow, say) in one transaction whose commit waits for
// a synchronous standby that is not there: flushed, in the WAL, not
// visible to other sessions. release lets the standby go and waits for
// the commit to end.
func commitInTheGap(t *testing.T, txn string) (st *Stream, release func()) {
	t.Helper()
	ctx := context.Background()
	srv := startDB(t, "vis")
	psql(t, srv, srv.DSN("vis"), `CREATE TABLE t (id int4 PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')`)
	st, _, _ = open(t, srv.DSN("vis")+"&tables=t")
	setStandbys := func(names string) {
		t.Helper()
		psql(t, srv, srv.DSN("postgres"), "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'")
		psql(t, srv, srv.DSN("postgres"), "SELECT pg_reload_conf()")
		// The reload is the postmaster's, a moment later: a new
		// session shows when it took.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, err := srv.Psql(ctx, "postgres", "SHOW synchronous_standby_names")
			if err == nil && strings.TrimSpace(out) == names {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("synchronous_standby_names still %q, not %q", out, names)
			}
		}
	}
	setStandbys("nosuch")
	committed := make(chan error, 1)
	go func() {
		_, err := srv.Psql(ctx, "vis", txn)
		committed <- err
	}()
	// The transaction is in the WAL, and its backend waits.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := srv.Psql(ctx, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname = 'vis' AND wait_event = 'SyncRep'")
		if err == nil && strings.TrimSpace(out) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit waits for the standby: %q %v", out, err)
		}
	}
	released := false
	return st, func() {
		t.Helper()
		if released {
			return
		}
		released = true
		select {
		case err := <-committed:
			t.Fatalf("the transaction's commit ended before the standby was let go: %v", err)
		default:
		}
		setStandbys("")
		if err := <-committed; err != nil {
			t.Fatal(err)
		}
	}
}

// A table renamed in a transaction the stream hands out before others
// can see it is followed under its new name all the same: whether it
// can be (its old name free, its new one its relation) is asked once the
// catalog shows the rename. Asked before, the old name was still there,
// and the rename was left to the operator (the tables runbook, now and
// then in CI).
func TestARenameIsLookedUpOnceItsTransactionIsVisible(t *testing.T) {
	t.Parallel()
	st, release := commitInTheGap(t, `BEGIN; ALTER TABLE t RENAME TO t2; UPDATE t2 SET v = 'renamed'; COMMIT`)
	got := nextTxn(st)
	select {
	case n := <-got:
		t.Fatalf("the transaction was handed out before others could see it: %+v, %v", n.it, n.err)
	case <-time.After(2 * time.Second):
	}
	release()
	if n := <-got; n.err != nil {
		t.Fatal(n.err)
	}
	holds := st.TakeHolds()
	if len(holds) != 1 || holds[0].Table != "public.t" || holds[0].RenamedTo != "public.t2" {
		t.Fatalf("holds: %+v, want public.t followed to public.t2", holds)
	}
}

type next struct {
	it  Item
	err error
}

// nextTxn reads the stream in the background up to its next transaction
// (or error).
func nextTxn(st *Stream) <-chan next {
	got := make(chan next, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for {
			it, err := st.Next(ctx)
			if err != nil || it.Txn != nil {
				got <- next{it, err}
				return
			}
		}
	}()
	return got
}

// A column added to a table of REPLICA IDENTITY FULL (where the relation
// message flags every column as the identity's) is NULL-able as the
// catalog says: it was written NOT NULL into the sink's schema, and one
// added NOT NULL to another table NULL-able.
func TestAnAddedColumnIsNullableAsTheCatalogSays(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE f (id int4 PRIMARY KEY, v text); ALTER TABLE f REPLICA IDENTITY FULL; INSERT INTO f VALUES (1, 'a');
		CREATE TABLE g (id int4 PRIMARY KEY, v text); INSERT INTO g VALUES (1, 'a')`)
	st, _, _ := open(t, dsn+"&tables=f,g")
	psql(t, srv, dsn, `ALTER TABLE f ADD COLUMN maybe int4, ADD COLUMN never int4 NOT NULL DEFAULT 0; ALTER TABLE g ADD COLUMN never int4 NOT NULL DEFAULT 0;
		INSERT INTO f VALUES (2, 'b', NULL, 1); INSERT INTO g VALUES (2, 'b', 1)`)
	n := <-nextTxn(st)
	if n.err != nil {
		t.Fatal(n.err)
	}
	got := map[string]string{}
	for _, e := range n.it.Txn.Events {
		if e.Kind != source.KindDDL {
			continue
		}
		var cols []string
		for _, c := range e.Def.Columns {
			cols = append(cols, fmt.Sprintf("%s null=%v", c.Name, c.Nullable))
		}
		got[e.Table] = strings.Join(cols, ", ")
	}
	want := map[string]string{
		"public.f": "id null=false, v null=true, maybe null=true, never null=false",
		"public.g": "id null=false, v null=true, never null=false",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the schema changes' columns:\n%v\nwant\n%v", got, want)
	}
}
