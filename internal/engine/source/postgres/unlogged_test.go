package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A partition of a replicated table made UNLOGGED writes none of its
// rows to the WAL: their changes never come, and PostgreSQL says nothing
// (it refuses SET UNLOGGED on a table in a publication, not on a
// partition of one). A changefeed refuses a table with such a partition,
// saying what to run; one whose partition becomes so is held: at the
// SET UNLOGGED itself where the changefeed has its event triggers (the
// row written while it was unlogged is lost, the one after SET LOGGED
// does not arrive as if nothing had happened), and by the catalog's look
// for a partition created UNLOGGED. Before, every change of those rows
// was lost without a word.
func TestAnUnloggedPartitionHoldsItsTable(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE m_1 PARTITION OF m FOR VALUES FROM (0) TO (100);
		CREATE TABLE m_2 PARTITION OF m FOR VALUES FROM (100) TO (200);
		CREATE TABLE n (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE UNLOGGED TABLE n_1 PARTITION OF n FOR VALUES FROM (0) TO (100);
		CREATE TABLE a (id int4 PRIMARY KEY, v text)`)
	ctx := context.Background()
	if _, _, err := Pin(ctx, dsn+"&tables=n,a", "unlogged_n", time.Now()); err == nil || !strings.Contains(err.Error(), "partition public.n_1 of table public.n is UNLOGGED") ||
		!strings.Contains(err.Error(), "ALTER TABLE public.n_1 SET LOGGED") {
		t.Fatalf("a changefeed of a table with an UNLOGGED partition: %v", err)
	}
	needMessages(t, srv)
	// Looks an hour apart: the SET UNLOGGED is found by its mark alone.
	uri, pos, err := Pin(ctx, dsn+"&tables=m,a&catalog-interval=1h", "unlogged", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	run := startReading(t, uri, "unlogged", pos)
	for _, q := range []string{
		`INSERT INTO m VALUES (1, 'm1')`,
		`ALTER TABLE m_1 SET UNLOGGED`,
		`INSERT INTO m VALUES (2, 'lost')`,
		`ALTER TABLE m_1 SET LOGGED`,
		`INSERT INTO m VALUES (3, 'after'), (150, 'other partition')`,
		`INSERT INTO a VALUES (1, 'a1')`,
	} {
		psql(t, srv, dsn, q)
	}
	held := func(r *reading) *source.TableIssue { return r.issue("public.m", source.TableHeld) }
	run.until(t, "a1, and m held", func() bool { return logHas(run.log, "public.a", "a1") && held(run) != nil })
	if r := held(run).Reason; !strings.Contains(r, "partition public.m_1 of it is UNLOGGED") || !strings.Contains(r, "ALTER TABLE public.m_1 SET LOGGED") ||
		!strings.Contains(r, "changefeed update unlogged --copy-table public.m") {
		t.Fatalf("the hold says: %s", r)
	}
	if !logHas(run.log, "public.m", "m1") || logHas(run.log, "public.m", "after") || logHas(run.log, "public.m", "other partition") {
		t.Fatalf("m's row before arrived %v (want true), its rows after %v, %v (want false)", logHas(run.log, "public.m", "m1"),
			logHas(run.log, "public.m", "after"), logHas(run.log, "public.m", "other partition"))
	}
	run.stop(t)

	// A partition created UNLOGGED: found by the look.
	psql(t, srv, dsn, `CREATE TABLE b (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id)`)
	uri2, pos2, err := Pin(ctx, dsn+"&tables=b&catalog-interval=1h", "unlogged_b", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := startReading(t, uri2, "unlogged_b", pos2, func(s *Source) { s.dropEvery = 200 * time.Millisecond })
	psql(t, srv, dsn, `CREATE UNLOGGED TABLE b_1 PARTITION OF b FOR VALUES FROM (0) TO (100)`)
	b.until(t, "b held by the look", func() bool { return b.issue("public.b", source.TableHeld) != nil })
	if r := b.issue("public.b", source.TableHeld).Reason; !strings.Contains(r, "partition public.b_1 of it is UNLOGGED") {
		t.Fatalf("the hold says: %s", r)
	}
	b.stop(t)
}
