package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A renamed table is held where its rows under the new name begin, and
// a dropped one reported; the other table's rows go on arriving, and
// the reader never stops. A reader started again after the rename holds
// the table from the start (it no longer exists under its name).
func TestARenamedTableIsHeldAndADroppedOneReportedWhileTheOthersGoOn(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE c (id int4 PRIMARY KEY, v text)`)
	ctx := context.Background()
	uri, pos, err := Pin(ctx, dsn+"&tables=a,b,c", "held", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Its own reader looks for dropped tables every 200 ms, not 10 s.
	run := startReading(t, uri, "held", pos, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1'); INSERT INTO c VALUES (1, 'c1')`)
	psql(t, srv, dsn, `ALTER TABLE b RENAME TO b2`)
	psql(t, srv, dsn, `INSERT INTO b2 VALUES (2, 'b2'); INSERT INTO a VALUES (2, 'a2')`)
	psql(t, srv, dsn, `DROP TABLE c`)
	psql(t, srv, dsn, `INSERT INTO a VALUES (3, 'a3')`)

	issue := func(table, state string) *source.TableIssue { return run.issue(table, state) }
	run.until(t, "b held, c dropped and a3 read", func() bool {
		return issue("public.c", source.TableDropped) != nil && issue("public.b", source.TableHeld) != nil && logHas(run.log, "public.a", "a3")
	})
	held := issue("public.b", source.TableHeld)
	if !strings.Contains(held.Reason, "renamed upstream to public.b2") || !strings.Contains(held.Reason, "changefeed update held --remove-table public.b --add-table public.b2") || held.RenamedTo != "public.b2" {
		t.Fatalf("the hold says: %s", held.Reason)
	}
	run.log.mu.Lock()
	at, ok := run.log.holds["public.b"]
	held2 := false // a row of b at or after its hold reached the log
	for _, e := range run.log.evs {
		if e.Table == "public.b" && e.Kind == source.KindDML && (e.New[1].Text == "b2" || e.CommitTs >= at) {
			held2 = true
		}
	}
	run.log.mu.Unlock()
	if !ok || at != held.At {
		t.Fatalf("the log holds public.b at %v (%v), the issue says %v", at, ok, held.At)
	}
	if held2 {
		t.Fatal("a row of the renamed table at or after its hold reached the log")
	}
	if !logHas(run.log, "public.b", "b1") || !logHas(run.log, "public.c", "c1") {
		t.Fatal("rows written before the rename and the drop are missing")
	}
	run.stop(t)

	// A new run from the same resume point holds the table again.
	again := startReading(t, uri, "held", pos)
	again.until(t, "the second run reads a3", func() bool { return logHas(again.log, "public.a", "a3") })
	again.stop(t)
	again.log.mu.Lock()
	_, heldAgain := again.log.holds["public.b"]
	again.log.mu.Unlock()
	if !heldAgain {
		t.Fatal("the second run did not hold the renamed table")
	}
}

// reading is a source's reader running into a memory log.
type reading struct {
	src    *Source
	log    *memLog
	done   chan error
	cancel context.CancelFunc
}

// lookingOften pins changefeed cf of uri and runs its reader from its
// start, looking at the catalog every 200 ms, not 10 s.
func lookingOften(t *testing.T, uri string, cf model.ChangefeedID) (*reading, Config) {
	t.Helper()
	stored, pos, err := Pin(context.Background(), uri, cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	return startReading(t, stored, cf, pos, func(s *Source) { s.dropEvery = 200 * time.Millisecond }), cfg
}

// startReading opens a stored URI and runs its reader from pos.
func startReading(t *testing.T, uri string, cf model.ChangefeedID, pos source.Position, opts ...func(*Source)) *reading {
	t.Helper()
	src, err := Open(uri, source.Env{Changefeed: cf})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(src)
	}
	t.Cleanup(func() { _ = src.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	r := &reading{src: src, log: &memLog{}, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- src.Pull(ctx, pos, r.log) }()
	t.Cleanup(cancel)
	return r
}

// until waits up to 30 s for cond, failing if the reader stops first.
func (r *reading) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("the reader stopped before %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
	}
}

// issue is what the reader reports of a table in a state, if it does.
func (r *reading) issue(table, state string) *source.TableIssue {
	for _, i := range r.src.TableIssues() {
		if i.Table == table && i.State == state {
			return &i
		}
	}
	return nil
}

// stop stops the reader, which must not have failed.
func (r *reading) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the reader stopped: %v", err)
	}
}

// logHas says whether a row of a table with value v in its second column
// reached the log.
func logHas(l *memLog, table, v string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == source.KindDML && e.Table == table && len(e.New) > 1 && e.New[1].Text == v {
			return true
		}
	}
	return false
}

// Two of the changefeed's tables swapped by renames in one transaction
// (a blue-green table swap): the one that took the other's name is held
// as renamed, its rows under that name not taken for a gone relation's.
// They were dropped, the table never held, and its checkpoint went past
// them.
func TestATableRenamedToAnotherReplicatedTablesNameIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE orders (id int4 PRIMARY KEY, v text);
		CREATE TABLE orders_new (id int4 PRIMARY KEY, v text)`)
	ctx := context.Background()
	uri, pos, err := Pin(ctx, dsn+"&tables=orders,orders_new", "swap", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	run := startReading(t, uri, "swap", pos)
	psql(t, srv, dsn, `INSERT INTO orders VALUES (1, 'old'); INSERT INTO orders_new VALUES (1, 'new')`)
	psql(t, srv, dsn, `BEGIN; ALTER TABLE orders RENAME TO orders_old; ALTER TABLE orders_new RENAME TO orders; COMMIT`)
	psql(t, srv, dsn, `INSERT INTO orders VALUES (2, 'new2')`)
	held := func() *source.TableIssue { return run.issue("public.orders_new", source.TableHeld) }
	run.until(t, "orders_new held", func() bool { return held() != nil })
	if r := held().Reason; !strings.Contains(r, "renamed upstream to public.orders") {
		t.Fatalf("the hold says: %s", r)
	}
	run.stop(t)
	if !logHas(run.log, "public.orders_new", "new") || !logHas(run.log, "public.orders", "old") {
		t.Fatal("rows written before the swap are missing")
	}
	if logHas(run.log, "public.orders", "new2") || logHas(run.log, "public.orders_new", "new2") {
		t.Fatal("a row of the held table, written after the swap, reached the log")
	}
}

// A table renamed upstream and left idle is held all the same, found in
// the catalog rather than in the stream (which describes a relation only
// before its next row): followed under its new name where its old one is
// free, left to the operator where a table was created under it (an
// archive: "RENAME TO b_old; CREATE TABLE b"). Rows written before the
// rename arrive. Neither was held before, nor reported.
func TestATableRenamedAwayAndLeftIdleIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE c (id int4 PRIMARY KEY, v text)`)
	ctx := context.Background()
	uri, pos, err := Pin(ctx, dsn+"&tables=a,b,c", "away", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	run := startReading(t, uri, "away", pos, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
	psql(t, srv, dsn, `INSERT INTO b VALUES (1, 'b1'); INSERT INTO c VALUES (1, 'c1')`)
	psql(t, srv, dsn, `ALTER TABLE b RENAME TO b_old; CREATE TABLE b (id int4 PRIMARY KEY, v text); ALTER TABLE c RENAME TO c2`)
	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1')`)
	issue := func(table string) *source.TableIssue { return run.issue(table, source.TableHeld) }
	run.until(t, "b and c held", func() bool { return issue("public.b") != nil && issue("public.c") != nil })
	if b := issue("public.b"); !strings.Contains(b.Reason, "renamed upstream to public.b_old") || b.RenamedTo != "" {
		t.Fatalf("b, renamed away and its name taken again: %+v", b)
	}
	if c := issue("public.c"); c.RenamedTo != "public.c2" {
		t.Fatalf("c, renamed away: %+v", c)
	}
	run.until(t, "the rows before the renames", func() bool { return logHas(run.log, "public.b", "b1") && logHas(run.log, "public.c", "c1") })
	run.stop(t)
}

// A table taken out of the publication is held, saying that its changes
// since are lost and what to do, and stays held once it is put back
// (the changes meanwhile never come); the other table goes on. Before,
// its changes were lost without a trace once it was back.
func TestATableTakenOutOfThePublicationIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text)`)
	run, cfg := lookingOften(t, dsn+"&tables=a,b", "unpub")
	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1')`)
	run.until(t, "the first rows", func() bool { return logHas(run.log, "public.a", "a1") && logHas(run.log, "public.b", "b1") })
	psql(t, srv, dsn, `ALTER PUBLICATION `+cfg.Publication+` DROP TABLE b; INSERT INTO b VALUES (2, 'lost')`)
	held := func() *source.TableIssue { return run.issue("public.b", source.TableHeld) }
	run.until(t, "b held", func() bool { return held() != nil })
	if r := held().Reason; !strings.Contains(r, "not in publication "+cfg.Publication) || !strings.Contains(r, "ALTER PUBLICATION "+cfg.Publication+" ADD TABLE") ||
		!strings.Contains(r, "changefeed update unpub --copy-table public.b") {
		t.Fatalf("the hold says: %s", r)
	}
	psql(t, srv, dsn, `ALTER PUBLICATION `+cfg.Publication+` ADD TABLE b; INSERT INTO b VALUES (3, 'b3'); INSERT INTO a VALUES (2, 'a2')`)
	run.until(t, "a2", func() bool { return logHas(run.log, "public.a", "a2") })
	time.Sleep(500 * time.Millisecond) // looks that would let it go
	if held() == nil || logHas(run.log, "public.b", "b3") {
		t.Fatalf("b put back: held %v, its later row arrived %v", held() != nil, logHas(run.log, "public.b", "b3"))
	}
	run.stop(t) // the reader ran on all along
}

// A publication dropped while nothing is written is found by the
// reader's look, not only by the stream's next change (which on
// PostgreSQL 18 only warns, and on 13 to 17 may say so in the server's
// language): the reader ends as unresumable, saying what to do.
func TestADroppedPublicationIsFoundByTheLook(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text)`)
	run, cfg := lookingOften(t, dsn+"&tables=a", "nopub")
	psql(t, srv, dsn, `DROP PUBLICATION `+cfg.Publication)
	select {
	case err := <-run.done:
		if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "publication "+cfg.Publication+" does not exist") {
			t.Fatalf("the reader after its publication was dropped: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader went on for 30 s without its publication")
	}
}
