package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A column given new values under its own type (TYPE text USING
// upper(v) on a text column) changes every row without a row in the
// stream and without a type the stream could see changed: the
// changefeed's table_rewrite trigger marks the table, and it is copied
// again, once, though each of its partitions was rewritten; the rows
// rebuilt equal the upstream's. A VACUUM FULL, which keeps every value,
// copies nothing. Removing the changefeed drops the trigger.
func TestAColumnRewrittenUnderItsOwnTypeIsCopiedAgain(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		INSERT INTO m SELECT g, date '2024-01-01' + (g % 700), 'v' || g, 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	const cf = "rewrite-same-type"
	stored, pos, err := Pin(ctx, dsn+"&tables=public.m&chunk-rows=500", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	pubs := publicationTriggers(cfg)
	triggers := func() string { // the changefeed's: on table_rewrite, before and after ALTER PUBLICATION
		out, err := srv.Psql(ctx, dbOf(dsn), `SELECT count(*) FROM pg_event_trigger WHERE evtname IN ('`+rewriteTrigger(cfg)+`', '`+pubs[0]+`', '`+pubs[1]+`')`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	enabled := func() string { // O, A, R or D: evtenabled
		out, err := srv.Psql(ctx, dbOf(dsn), `SELECT evtenabled FROM pg_event_trigger WHERE evtname = '`+rewriteTrigger(cfg)+`'`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if n, e := triggers(), enabled(); n != "3" || e != "A" {
		t.Fatalf("%s event triggers of the changefeed's, %s enabled %q; want 3, enabled always (A)", n, rewriteTrigger(cfg), e)
	}
	if st, err := Inspect(ctx, stored, nil); err != nil || len(st.Warnings) != 0 {
		t.Fatalf("changefeed get warns %q (%v)", st.Warnings, err)
	}
	// The trigger dropped (a changefeed made before cdcctl made them): its
	// reader makes it when it starts.
	psql(t, srv, dsn, `DROP EVENT TRIGGER `+rewriteTrigger(cfg))
	if n := triggers(); n != "2" {
		t.Fatalf("%s event triggers after the drop", n)
	}
	// Looks at the catalog often: a table copied again under a type the
	// stream has not described yet waits for the look that describes it.
	rig := pullFrom(t, stored, pos, cf, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
	for deadline := time.Now().Add(30 * time.Second); triggers() != "3"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader did not make the changefeed's missing event trigger")
		}
	}
	p := rig.run(model.Span{Table: "public.m", Key: "int8,date"}, rig.start, model.CopyProgress{})
	p.waitDone(t)
	waitRow := func(key string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !p.has(key); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("row %s did not arrive", key)
			}
		}
	}

	psql(t, srv, dsn, `VACUUM FULL m_2024`)
	psql(t, srv, dsn, `INSERT INTO m VALUES (90001, '2024-06-01', 'after vacuum', 0)`)
	waitRow("90001,2024-06-01")
	p.mu.Lock()
	begun := p.begun
	p.mu.Unlock()
	if begun != 0 {
		t.Fatalf("a VACUUM FULL began %d copies again", begun)
	}

	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN v TYPE text USING upper(v); INSERT INTO m VALUES (90002, '2025-06-01', 'after', 0)`)
	p.waitCopiedAgain(t, 1)
	waitRow("90002,2025-06-01")
	// A new type, values computed, in a transaction of its own: the
	// mark copies the table at the ALTER's commit; the stream meets the
	// new type later (the catalog's look describes the table, or its next
	// row does), and copies nothing more (TableState.RewriteMarked).
	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN n TYPE int8 USING n + 7`)
	p.waitCopiedAgain(t, 2)
	psql(t, srv, dsn, `INSERT INTO m VALUES (90003, '2025-06-01', 'retyped', 1)`)
	waitRow("90003,2025-06-01")
	psql(t, srv, dsn, `INSERT INTO m VALUES (90004, '2025-06-01', 'last', 1)`)
	waitRow("90004,2025-06-01")
	time.Sleep(500 * time.Millisecond) // a third copy would have begun by now
	copiesOfRow1 := func() (begun, copies int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i := range p.evs {
			if p.evs[i].Kind == source.KindDML && textKey(&p.evs[i]) == "1,2024-01-02" {
				copies++
			}
		}
		return p.begun, copies
	}
	if begun, copies := copiesOfRow1(); begun != 2 || copies != 3 {
		t.Fatalf("the copy began again %d times, and row 1 arrived %d times: want twice, and three times (the first copy's and two more)", begun, copies)
	}
	// A mark of a rewrite under the same type on the table left idle,
	// then a change of a column's type with new values that no trigger
	// marks (the trigger disabled for its transaction): the catalog's
	// look meets the columns of the second, not those the mark gave, and
	// the table is copied again for each.
	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN v TYPE text USING lower(v)`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// (That copy done first: a mark met while one runs is queued
		// behind it, and the copy count here would not see it begin.)
		if begun, _ := copiesOfRow1(); begun == 3 && p.progress().Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the same-type rewrite's copy did not begin and end: progress %+v", p.progress())
		}
	}
	trigger := pgx.Identifier{rewriteTrigger(cfg)}.Sanitize()
	psql(t, srv, dsn, `BEGIN; ALTER EVENT TRIGGER `+trigger+` DISABLE; ALTER TABLE m ALTER COLUMN n TYPE numeric USING n * 2; ALTER EVENT TRIGGER `+trigger+` ENABLE ALWAYS; COMMIT`)
	copied := func(wantBegun, wantCopies int, what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			begun, copies := copiesOfRow1()
			if begun == wantBegun && copies == wantCopies && p.progress().Done {
				return
			}
			if time.Now().After(deadline) || begun > wantBegun {
				t.Fatalf("after %s the copy began again %d times, and row 1 arrived %d times: want %d and %d; progress %+v", what, begun, copies, wantBegun, wantCopies, p.progress())
			}
		}
	}
	copied(4, 5, "a marked rewrite and an unmarked one")
	// A same-type rewrite in a session in replica mode (bulk loads and
	// migration tools run so): the trigger runs there too (ENABLE
	// ALWAYS), and the rows' new values are copied.
	psql(t, srv, dsn, `SET session_replication_role = replica; ALTER TABLE m ALTER COLUMN v TYPE text USING v || '!'`)
	copied(5, 6, "a rewrite in a session in replica mode")
	evs := p.stopped(t)
	rig.stop(t)
	if n := rebuiltEqualsM(t, srv, dsn, evs); n != 3004 {
		t.Fatalf("%d rows upstream", n)
	}
	// Enabled for ordinary sessions only (ENABLE: as an older cdcctl made
	// it, and as its messages told an operator to turn it on again): said,
	// and made anew, enabled always, as a reader does when it starts.
	// Disabled: said, and left so.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, c := range []struct{ set, warn, after string }{
		{"ENABLE", "runs in some sessions only", "A"},
		{"DISABLE", "is disabled", "D"},
	} {
		psql(t, srv, dsn, `ALTER EVENT TRIGGER `+trigger+` `+c.set)
		if st, err := Inspect(ctx, stored, nil); err != nil || len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], c.warn) {
			t.Errorf("after %s changefeed get warns %q (%v); want it %s", c.set, st.Warnings, err, c.warn)
		}
		if _, err := ensureRewriteTrigger(ctx, conn, cfg); err != nil {
			t.Fatal(err)
		}
		if e := enabled(); e != c.after {
			t.Errorf("after %s and a reader's start the trigger is enabled %q; want %q", c.set, e, c.after)
		}
	}
	if err := Remove(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if n := triggers(); n != "0" {
		t.Fatalf("%s event triggers left after the changefeed's removal", n)
	}
}

// A trigger's name stays within PostgreSQL's 63 bytes, and two long slot
// names alike in their first bytes name two triggers.
func TestRewriteTriggerNamesFitAndDiffer(t *testing.T) {
	long := strings.Repeat("x", 60)
	a, b := rewriteTrigger(Config{Slot: long + "a"}), rewriteTrigger(Config{Slot: long + "b"})
	if len(a) > 63 || len(b) > 63 || a == b {
		t.Fatalf("%q and %q", a, b)
	}
	if got := rewriteTrigger(Config{Slot: "cdcctl_demo"}); got != "cdcctl_demo_rewrites" {
		t.Fatalf("%q", got)
	}
	pa, pb := publicationTriggers(Config{Slot: long + "a"}), publicationTriggers(Config{Slot: long + "b"})
	seen := map[string]bool{a: true, b: true}
	for _, n := range append(pa[:], pb[:]...) {
		if len(n) > 63 || seen[n] {
			t.Fatalf("%q: too long, or another trigger's name (%q, %q)", n, pa, pb)
		}
		seen[n] = true
	}
}

// A partition that is itself partitioned, replicated on its own: a
// same-type rewrite through the table above it rewrites its leaves, and
// each leaf's mark names it among the leaf's ancestors: it is copied
// again, once, with the new values.
func TestARewriteReachesASubPartitionedPartitionReplicatedAlone(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE r (id int8, region int4, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE r_1 PARTITION OF r FOR VALUES IN (1) PARTITION BY RANGE (id);
		CREATE TABLE r_1_low PARTITION OF r_1 FOR VALUES FROM (0) TO (1000);
		CREATE TABLE r_1_high PARTITION OF r_1 FOR VALUES FROM (1000) TO (100000);
		CREATE TABLE r_2 PARTITION OF r FOR VALUES IN (2);
		INSERT INTO r SELECT g, 1 + g % 2, 'v' || g FROM generate_series(1, 2000) g`)
	const cf = "rewrite-sub-partition"
	stored, pos, err := Pin(context.Background(), dsn+"&tables=public.r_1", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rig := pullFrom(t, stored, pos, cf, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
	p := rig.run(model.Span{Table: "public.r_1", Key: "int8,int4"}, rig.start, model.CopyProgress{})
	p.waitDone(t)
	psql(t, srv, dsn, `ALTER TABLE r ALTER COLUMN v TYPE text USING upper(v)`)
	p.waitCopiedAgain(t, 1)
	evs := p.stopped(t)
	rig.stop(t)
	for _, key := range []string{"2,1", "1998,1"} {
		v := ""
		for i := range evs {
			if e := &evs[i]; e.Kind == source.KindDML && textKey(e) == key {
				v = e.New[2].Text
			}
		}
		if want := "V" + strings.TrimSuffix(key, ",1"); v != want {
			t.Fatalf("row %s last read with %q, want %q", key, v, want)
		}
	}
}

// The trigger's function is the superuser's own, made anew, never one
// another user put under its name first (CREATE OR REPLACE would have
// kept that user as its owner, and the trigger would run that user's
// body as whoever runs the next ALTER); nor does it run with its
// owner's rights.
func TestTheTriggersFunctionIsNeverAnotherUsers(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE ROLE squatter LOGIN; GRANT CREATE ON SCHEMA public TO squatter;
		CREATE TABLE q (id int8 PRIMARY KEY, v text)`)
	const cf = "rewrite-squatted"
	cfg, err := ParseURI(dsn + "&tables=public.q")
	if err != nil {
		t.Fatal(err)
	}
	name := rewriteTrigger(cfg.WithNames(cf))
	psql(t, srv, dsn, `SET ROLE squatter; CREATE FUNCTION public.`+name+`() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN RAISE NOTICE 'squatted'; END $$`)
	stored, _, err := Pin(context.Background(), dsn+"&tables=public.q", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out, err := srv.Psql(context.Background(), dbOf(dsn), `SELECT p.proowner::regrole::text || '|' || p.prosecdef FROM pg_event_trigger e JOIN pg_proc p ON p.oid = e.evtfoid WHERE e.evtname = '`+name+`'`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != "postgres|false" {
		t.Fatalf("the trigger's function: owner|security definer %q, want postgres|false", got)
	}
	stored2, err := ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(context.Background(), stored2); err != nil {
		t.Fatal(err)
	}
}
