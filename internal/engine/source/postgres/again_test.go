package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A column's type changed without a rewrite (varchar(40) to varchar(80))
// keeps every row's value: nothing is copied again. Changed with one
// (USING upper(v)) it changes every row's value without a row in the
// stream: the table is copied again, once, and the rows rebuilt equal the
// upstream's. A reader started again from before both changes meets them
// again and marks the second again; the partition, past the first mark,
// does not copy the table a second time.
func TestATableRewrittenByANewColumnTypeIsCopiedAgainOnce(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v varchar(40), n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		INSERT INTO m SELECT g, date '2024-01-01' + (g % 700), 'v' || g, 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	const cf = "retype-again"
	stored, pos, err := Pin(ctx, dsn+"&tables=public.m&chunk-rows=200", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	whole := model.Span{Table: "public.m", Key: "int8,date"}
	first := pullFrom(t, stored, pos, cf, nil)
	p := first.run(whole, first.start, model.CopyProgress{})
	p.waitDone(t)

	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN v TYPE varchar(80); INSERT INTO m VALUES (90001, '2024-06-01', 'widened', 0)`)
	for deadline := time.Now().Add(60 * time.Second); !p.has("90001,2024-06-01"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the row after the widening did not arrive")
		}
	}
	p.mu.Lock()
	begun, c := p.begun, p.copied
	p.mu.Unlock()
	if begun != 0 || !c.Done {
		t.Fatalf("a type changed without a rewrite began %d copies; progress %+v", begun, c)
	}

	psql(t, srv, dsn, `ALTER TABLE m ALTER COLUMN v TYPE text USING upper(v); UPDATE m SET n = n + 1 WHERE id % 10 = 0`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c = p.begun, p.copied
		p.mu.Unlock()
		if begun == 1 && c.Done {
			break
		}
		if time.Now().After(deadline) || begun > 1 {
			t.Fatalf("the rewritten table's copy began %d times; progress %+v", begun, c)
		}
	}
	at, copied := p.stopAt(t)
	evs := p.stopped(t)
	first.stop(t)
	if n := rebuiltEqualsM(t, srv, dsn, evs); n != 3001 {
		t.Fatalf("%d rows upstream", n)
	}

	second := pullFrom(t, stored, pos, cf, nil)
	again := second.run(whole, at, copied)
	// The reader marks the change again when it meets it, before it
	// hands out the rows after it: a row written once one of those has
	// arrived comes after the second mark.
	for _, key := range []string{"90002,2025-06-01", "90003,2025-06-01"} {
		psql(t, srv, dsn, `INSERT INTO m VALUES (`+key[:5]+`, '2025-06-01', 'last', 0)`)
		for deadline := time.Now().Add(60 * time.Second); !again.has(key); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("row %s did not arrive", key)
			}
		}
	}
	again.mu.Lock()
	begun, c = again.begun, again.copied
	again.mu.Unlock()
	if begun != 0 || !c.Done {
		t.Fatalf("the partition past the first mark began %d copies again; its progress %+v", begun, c)
	}
	if n := rebuiltEqualsM(t, srv, dsn, append(evs, again.stopped(t)...)); n != 3003 {
		t.Fatalf("%d rows upstream", n)
	}
	second.stop(t)
}

// A timestamp column changed to timestamptz by a session in UTC is not
// rewritten (PostgreSQL 12 and later), yet every value's text gains a
// zone: the table is copied again all the same, and a row not changed
// since arrives with its zone. It kept its old text downstream.
func TestATimestampGivenAZoneWithoutARewriteIsCopiedAgain(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE z (id int8 PRIMARY KEY, at timestamp);
		INSERT INTO z SELECT g, timestamp '2024-01-01 00:00:00' + g * interval '1 minute' FROM generate_series(1, 300) g`)
	ctx := context.Background()
	const cf = "zone-again"
	stored, pos, err := Pin(ctx, dsn+"&tables=public.z", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rig := pullFrom(t, stored, pos, cf, nil)
	p := rig.run(model.Span{Table: "public.z", Key: "int8"}, rig.start, model.CopyProgress{})
	p.waitDone(t)
	psql(t, srv, dsn, `SET TIME ZONE 'UTC'; ALTER TABLE z ALTER COLUMN at TYPE timestamptz; INSERT INTO z VALUES (1000, now())`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c := p.begun, p.copied
		p.mu.Unlock()
		if begun == 1 && c.Done && p.has("1000") {
			break
		}
		if time.Now().After(deadline) || begun > 1 {
			t.Fatalf("the retyped table's copy began %d times; progress %+v", begun, c)
		}
	}
	evs := p.stopped(t)
	rig.stop(t)
	var last string
	for _, e := range evs {
		if e.Kind == source.KindDML && textKey(&e) == "1" {
			last = e.New[1].Text
		}
	}
	if last != "2024-01-01 00:01:00+00" {
		t.Fatalf("row 1 last arrived with %q, want its value with a zone", last)
	}
}
