package postgres

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// "Load, then attach": a table loaded with rows and ATTACHed as a
// partition of a replicated table brings rows of which PostgreSQL writes
// no WAL record, and so does a partitioned table attached with loaded
// partitions of its own. The changefeed copies them while a workload
// updates them, each of its partitions its own key range; one stopped
// in the middle of that copy goes on from its progress, as after a move.
// The rows rebuilt from what the partitions read equal the table's, and
// no attached row was copied twice.
func TestARelationAttachedWithRowsIsCopiedOnce(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		INSERT INTO m SELECT g, date '2024-06-01' + (g % 200), md5(g::text), 0 FROM generate_series(1, 2000) g`)
	ctx := context.Background()
	rig := startCopyRigWith(t, dsn+"&tables=public.m&chunk-rows=50", "attach-once", func(s *Source) { s.dropEvery = 100 * time.Millisecond })
	cut, err := model.EncodeKeyValues("int8,date", []string{"6500", "2024-01-01"})
	if err != nil {
		t.Fatal(err)
	}
	lowSpan := model.Span{Table: "public.m", End: cut, Key: "int8,date"}
	highSpan := model.Span{Table: "public.m", Start: cut, Key: "int8,date"}
	low := rig.run(lowSpan, rig.start, model.CopyProgress{})
	high := rig.run(highSpan, rig.start, model.CopyProgress{})
	low.waitDone(t)
	high.waitDone(t)
	copiedBefore := low.copiedRows() + high.copiedRows()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	psql(t, srv, dsn, `CREATE TABLE m_load (id int8, day date, v text, n int4, PRIMARY KEY (id, day));
		INSERT INTO m_load SELECT g, date '2025-01-01' + (g % 300), md5(g::text), 0 FROM generate_series(5001, 8000) g;
		CREATE TABLE m_2026 (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2026_a PARTITION OF m_2026 FOR VALUES FROM ('2026-01-01') TO ('2026-07-01');
		CREATE TABLE m_2026_b PARTITION OF m_2026 FOR VALUES FROM ('2026-07-01') TO ('2027-01-01');
		INSERT INTO m_2026 SELECT g, date '2026-01-01' + (g % 360), md5(g::text), 0 FROM generate_series(9001, 10000) g;
		ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		ALTER TABLE m ATTACH PARTITION m_2026 FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	const attached = 4000
	// Updates of attached rows and of the others while they are copied;
	// the low partition is stopped and started again from its progress
	// once it copies an attached relation.
	rng := rand.New(rand.NewSource(11))
	updates, restarted := 0, false
	var evs []source.Event
	for i := 0; i < 3000 && (i < 300 || !restarted); i++ {
		var id int
		switch rng.Intn(3) {
		case 0:
			id = 1 + rng.Intn(2000)
		case 1:
			id, updates = 5001+rng.Intn(3000), updates+1
		default:
			id, updates = 9001+rng.Intn(1000), updates+1
		}
		if _, err := conn.Exec(ctx, `UPDATE m SET n = n + 1, v = 'upd' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if c := low.progress(); !restarted && c.Only != "" && c.To != "" {
			at, copied := low.stopAt(t)
			if copied.Only == "" || copied.Done {
				t.Fatalf("stopped while copying an attached relation, its progress says %+v", copied)
			}
			evs = append(evs, low.stopped(t)...)
			low, restarted = rig.run(lowSpan, at, copied), true
		}
	}
	if !restarted {
		t.Fatal("the low partition never copied an attached relation")
	}
	// The last row, in a partition that was not attached.
	psql(t, srv, dsn, `INSERT INTO m VALUES (999999, '2024-12-31', 'last', 0)`)
	for _, p := range []*partition{low, high} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if c := p.progress(); c.Done && c.Only == "" && c.Then == "" && high.has("999999,2024-12-31") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not copy what was attached: %+v", p.span, p.progress())
			}
		}
	}
	copied := low.copiedRows() + high.copiedRows() - copiedBefore
	for _, p := range []*partition{low, high} {
		evs = append(evs, p.stopped(t)...)
	}
	rig.stop(t)
	if n := rebuiltEqualsM(t, srv, dsn, evs); n != 2000+attached+1 {
		t.Fatalf("%d rows upstream", n)
	}
	// A row updated while its chunk was read is the stream's, not the
	// copy's: at most that many fewer are copied.
	if copied > attached || copied < int64(attached-updates) {
		t.Fatalf("%d rows copied after the attach, want %d less at most the %d updated", copied, attached, updates)
	}
	t.Logf("%d attached rows copied (%d updates meanwhile)", copied, updates)
}

// A reader started again from before the marks of an attachment (the
// changefeed's checkpoint was behind them, held by another partition)
// reads them back and does not mark the attachment again: a partition
// past those marks, which copied the attached rows, does not copy them
// a second time.
func TestAReaderStartedAgainDoesNotMarkAnAttachmentTwice(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_load (id int8, day date, v text, n int4, PRIMARY KEY (id, day));
		INSERT INTO m_load SELECT g, date '2025-01-01' + (g % 300), md5(g::text), 0 FROM generate_series(1001, 1500) g`)
	ctx := context.Background()
	const cf = "attach-again"
	stored, pos, err := Pin(ctx, dsn+"&tables=public.m", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	quick := func(s *Source) { s.dropEvery = 50 * time.Millisecond }
	// The table is empty until the attach: its partition's copy is done.
	whole := model.Span{Table: "public.m", Key: "int8,date"}
	first := pullFrom(t, stored, pos, cf, quick)
	p := first.run(whole, first.start, model.CopyProgress{Done: true})
	// Rows before the attach: the next reader streams them before it
	// meets the marks.
	psql(t, srv, dsn, `INSERT INTO m SELECT g, date '2024-01-01' + (g % 360), 'early', 0 FROM generate_series(100001, 120000) g`)
	psql(t, srv, dsn, `ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c := p.begun, p.copied
		p.mu.Unlock()
		if begun == 1 && c.Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attached rows' copy began %d times, progress %+v", begun, c)
		}
	}
	at, copied := p.stopAt(t)
	evs := p.stopped(t)
	first.stop(t)
	// Rows after the marks: the next reader streams them before it has
	// read back to where the WAL ended at its start, and looks only then.
	psql(t, srv, dsn, `INSERT INTO m SELECT g, date '2024-01-01' + (g % 360), 'later', 0 FROM generate_series(200001, 220000) g`)

	// The reader from its first resume point again, as after a crash, and
	// the partition from where it stopped, past the marks.
	second := pullFrom(t, stored, pos, cf, quick)
	again := second.run(whole, at, copied)
	time.Sleep(200 * time.Millisecond)
	psql(t, srv, dsn, `INSERT INTO m VALUES (99999, '2024-12-31', 'last', 0)`)
	// 40,000 rows stream before it: seconds with -race, a look due
	// every 50 ms all along (120,000 rows took 15 s alone and more than
	// 60 s in a CI run, three packages' race-enabled tests on two cores,
	// proving nothing more).
	second.waitFor(t, again, "99999,2024-12-31", 3*time.Minute)
	// Many looks later.
	time.Sleep(300 * time.Millisecond)
	again.mu.Lock()
	begun, c := again.begun, again.copied
	again.mu.Unlock()
	if begun != 0 || !c.Done {
		t.Fatalf("the partition past the marks began %d copies again; its progress %+v", begun, c)
	}
	if n := rebuiltEqualsM(t, srv, dsn, append(evs, again.stopped(t)...)); n != 40501 {
		t.Fatalf("%d rows upstream", n)
	}
	second.stop(t)
}

// Two changefeeds of one table on one database: each reads the other's
// attach marks in its slot's stream (every slot decodes every message)
// and takes only its own, so each copies the attached rows once, and
// neither takes the other's look for its own.
func TestEachChangefeedCopiesAnAttachmentOnceByItsOwnMarks(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_load (id int8, day date, v text, n int4, PRIMARY KEY (id, day));
		INSERT INTO m_load SELECT g, date '2025-01-01' + (g % 300), md5(g::text), 0 FROM generate_series(1001, 1500) g;
		CREATE TABLE m_more (id int8, day date, v text, n int4, PRIMARY KEY (id, day));
		INSERT INTO m_more SELECT g, date '2026-01-01' + (g % 300), md5(g::text), 0 FROM generate_series(2001, 2300) g`)
	// b looks much less often than a: its marks come after a's copies
	// are done, and a's before b's own.
	quick := func(s *Source) { s.dropEvery = 50 * time.Millisecond }
	slow := func(s *Source) { s.dropEvery = 1500 * time.Millisecond }
	// The table is empty until the attach: its partitions' copies are done.
	whole := model.Span{Table: "public.m", Key: "int8,date"}
	a := startCopyRigWith(t, dsn+"&tables=public.m", "attach-a", quick)
	b := startCopyRigWith(t, dsn+"&tables=public.m", "attach-b", slow)
	pa := a.run(whole, a.start, model.CopyProgress{Done: true})
	pb := b.run(whole, b.start, model.CopyProgress{Done: true})
	psql(t, srv, dsn, `ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	pa.waitCopiedAgain(t, 1)
	pb.waitCopiedAgain(t, 1)
	// Another, after both copies are done: one more copy each.
	psql(t, srv, dsn, `ALTER TABLE m ATTACH PARTITION m_more FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	pa.waitCopiedAgain(t, 2)
	pb.waitCopiedAgain(t, 2)
	time.Sleep(2 * time.Second) // each looked again since
	psql(t, srv, dsn, `INSERT INTO m VALUES (99999, '2024-12-31', 'last', 0)`)
	for _, p := range []*partition{pa, pb} {
		for deadline := time.Now().Add(60 * time.Second); !p.has("99999,2024-12-31"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the last row did not arrive")
			}
		}
		p.waitCopiedAgain(t, 2)
		if n := rebuiltEqualsM(t, srv, dsn, p.stopped(t)); n != 801 {
			t.Fatalf("%d rows upstream", n)
		}
	}
	a.stop(t)
	b.stop(t)
}
