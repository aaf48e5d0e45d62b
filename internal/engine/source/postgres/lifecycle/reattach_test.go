package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A partition detached while the changefeed's partitions copy its rows
// (attached with rows, "load, then attach"), written while detached, and
// attached again. PostgreSQL sends none of the rows written to it
// meanwhile, and they are keyed everywhere: before what the copies had
// copied, and after the last key when they began (their horizon). A
// partition's chunk read while it is detached finds none of its rows and
// ends that copy; the second attach copies it whole again (a partition
// that met the second attach still copying it copies it once more after:
// source's TestARelationAttachedAgainWhileItCopiesIsCopiedOnceMore). The
// table rebuilt from the sink equals the upstream's (no row lost, none
// stale), with a workload on the table's other partition throughout.
func TestAPartitionDetachedWrittenAndAttachedAgainWhileItCopiesIsCopiedWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	psql := func(sql string) {
		t.Helper()
		if _, err := srv.Psql(ctx, "shop", sql); err != nil {
			t.Fatal(err)
		}
	}
	psql(`
CREATE TABLE m (id int8, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
INSERT INTO m SELECT g, date '2024-01-01' + (g % 360), md5(g::text) FROM generate_series(1, 1000) g;
CREATE TABLE m_load (id int8, day date, v text, PRIMARY KEY (id, day));
INSERT INTO m_load SELECT g, date '2025-01-01' + (g % 360), md5(g::text) FROM generate_series(1, 3000) g;`)
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	// Slow enough that the attached rows take about five seconds to copy.
	tc.CreateChangefeed("pg", dsn+"&tables=public.m&chunk-rows=50&catalog-interval=1s&snapshot-rate=300", sink, 4)
	tc.WaitSnapshot("pg")

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	next := int64(100_000)
	w := enginetest.StartWriter(t, func(ctx context.Context) error {
		next++
		_, err := conn.Exec(ctx, `INSERT INTO m VALUES ($1, date '2024-06-01', 'new')`, next)
		return err
	}, 5*time.Millisecond)

	psql(`ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	tc.Eventually("a partition to copy some of the attached rows", 60*time.Second, func() bool {
		w.Failed(t)
		for _, p := range tc.State().Progress["pg"] {
			if c := p.Progress.Copy; c.Only != "" && c.To != "" {
				return true
			}
		}
		return false
	})
	psql(`ALTER TABLE m DETACH PARTITION m_load`)
	// Two looks of the changefeed's reader (every second) see it gone.
	time.Sleep(2500 * time.Millisecond)
	// Rows among those copied, and after the last when the copy began.
	psql(`
INSERT INTO m_load SELECT g, date '2025-12-31', 'while detached' FROM generate_series(3, 3000, 7) g;
INSERT INTO m_load SELECT g, date '2025-06-01', 'past the horizon' FROM generate_series(3001, 3100) g;
UPDATE m_load SET v = 'updated while detached' WHERE id % 13 = 0 AND day <> date '2025-12-31';`)
	t.Logf("attaching again: %s", tc.CopySummary("pg"))
	psql(`ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	// Past a look or three, and its mark: every partition has met it.
	time.Sleep(3 * time.Second)
	tc.WaitCheckpoint("pg", model.TsFromTimeMicros(time.Now()))
	tc.WaitSnapshot("pg")
	w.Stop(t)

	up, err := postgres.NewTableReader(dsn + "&tables=public.m")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.m"}, time.Now())
	if !rep.OK {
		t.Fatalf("after a partition was detached, written and attached again while it copied: %+v", rep)
	}
	t.Logf("%d inserts on the other partition meanwhile; %+v", w.Writes(), rep.TableReports)
}
