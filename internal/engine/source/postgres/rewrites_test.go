package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

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
	triggers := func() string {
		out, err := srv.Psql(ctx, dbOf(dsn), `SELECT count(*) FROM pg_event_trigger WHERE evtname = '`+rewriteTrigger(cfg)+`'`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if n := triggers(); n != "1" {
		t.Fatalf("%s event triggers named %s, want 1", n, rewriteTrigger(cfg))
	}
	if st, err := Inspect(ctx, stored, nil); err != nil || len(st.Warnings) != 0 {
		t.Fatalf("changefeed get warns %q (%v)", st.Warnings, err)
	}
	// Looks at the catalog often: a table copied again under a type the
	// stream has not described yet waits for the look that describes it.
	rig := pullFrom(t, stored, pos, cf, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
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
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c := p.begun, p.copied
		p.mu.Unlock()
		if begun == 1 && c.Done && p.has("90002,2025-06-01") {
			break
		}
		if time.Now().After(deadline) || begun > 1 {
			t.Fatalf("the rewritten table's copy began %d times (want once); progress %+v", begun, c)
		}
	}
	// A new type, values computed, in a transaction of its own: the
	// mark copies the table at the ALTER's commit; the stream meets the
	// new type later (the catalog's look describes the table, or its next
	// row does), and copies nothing more (TableState.RewriteMarked).
	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN n TYPE int8 USING n + 7`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c := p.begun, p.copied
		p.mu.Unlock()
		if begun == 2 && c.Done {
			break
		}
		if time.Now().After(deadline) || begun > 2 {
			t.Fatalf("after a second rewrite the copy began %d times (want twice); progress %+v", begun, c)
		}
	}
	psql(t, srv, dsn, `INSERT INTO m VALUES (90003, '2025-06-01', 'retyped', 1)`)
	waitRow("90003,2025-06-01")
	psql(t, srv, dsn, `INSERT INTO m VALUES (90004, '2025-06-01', 'last', 1)`)
	waitRow("90004,2025-06-01")
	time.Sleep(500 * time.Millisecond) // a third copy would have begun by now
	evs := p.stopped(t)
	rig.stop(t)
	copies := 0
	for i := range evs {
		if evs[i].Kind == source.KindDML && textKey(&evs[i]) == "1,2024-01-02" {
			copies++
		}
	}
	if p.begun != 2 || copies != 3 {
		t.Fatalf("the copy began again %d times, and row 1 arrived %d times: want twice, and three times (the first copy's and two more)", p.begun, copies)
	}
	if n := rebuiltEqualsM(t, srv, dsn, evs); n != 3004 {
		t.Fatalf("%d rows upstream", n)
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
}
