package lifecycle

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// attachedRows is how many rows the table attached holds: enough that
// its copy in chunks of 50 is still under way when the test moves a
// partition and drains the reader's capture (with 3,000, all four
// partitions had copied theirs between two saves of their progress, a
// second apart; with chunks of 50 the copy takes 2–3 s under -race, of
// 10, 20 s, most of the test's time).
const attachedRows = 20_000

// "Load, then attach" on a cluster: a changefeed of a time-partitioned
// table runs under a workload when a table loaded with 20,000 rows is
// ATTACHed as a partition. PostgreSQL writes no WAL record of those rows;
// the changefeed copies them (chunks of 50) while the workload updates
// and deletes them, and meanwhile a partition of the table is moved and
// the capture running the changefeed's reader is drained (the reader
// starts again elsewhere from the checkpoint, behind the attach's mark).
// The table rebuilt from the sink equals the upstream's, no change is
// written twice, and no attached row was copied twice: the reader that
// started again did not mark the attach a second time.
func TestAPartitionAttachedWithRowsIsCopiedThroughAMoveAndADrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `
CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
INSERT INTO m SELECT g, date '2024-01-01' + (g % 360), md5(g::text), 0 FROM generate_series(1, 2000) g;
CREATE TABLE m_load (id int8, day date, v text, n int4, PRIMARY KEY (id, day));
INSERT INTO m_load SELECT g, date '2025-01-01' + (g % 360), md5(g::text), 0 FROM generate_series(1, `+strconv.Itoa(attachedRows)+`) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("shop")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tc.CreateChangefeed("pg", dsn+"&tables=public.m&chunk-rows=50&catalog-interval=1s", sink, 4)
	tc.WaitSnapshot("pg")

	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- attachWorkload(ctx, dsn, stop) }()
	time.Sleep(300 * time.Millisecond)
	if _, err := srv.Psql(ctx, "shop", `ALTER TABLE m ATTACH PARTITION m_load FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`); err != nil {
		t.Fatal(err)
	}
	moved := ""
	tc.Eventually("a partition to copy some of the attached rows", 60*time.Second, func() bool {
		for id, p := range tc.State().Progress["pg"] {
			if c := p.Progress.Copy; c.Only != "" && c.To != "" {
				moved = id
				return true
			}
		}
		return false
	})
	t.Logf("attached: %s; moving %s", tc.CopySummary("pg"), moved)
	tc.MoveElsewhere(moved)
	reader := tc.MaintainerOf("pg")
	tc.NotCoordinator(reader)
	if s := tc.CopySummary("pg"); !strings.HasPrefix(s, "copying: ") {
		t.Logf("the attached rows were copied before the drain (%s): the drain moves a reader past its mark", s)
	}
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Drain(s, reader, 2, plan.DefaultCosts) })
	tc.WaitSnapshot("pg")
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, err := postgres.NewTableReader(dsn + "&tables=public.m")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.m"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the attach, a move and a drain: %+v", rep)
	}
	inserts, err := verify.Inserts(ctx, sink, "public.m")
	if err != nil {
		t.Fatal(err)
	}
	copied, twice := 0, 0
	for k, by := range inserts {
		id, _, _ := strings.Cut(k, ",")
		if n, _ := strconv.Atoi(id); n > attachedRows || !strings.Contains(k, ",2025-") {
			continue // not an attached row
		}
		copied++
		if len(by) > 1 {
			if twice++; twice <= 5 {
				t.Errorf("attached row %s was copied %d times: by %v", k, len(by), by)
			}
		}
	}
	if twice > 0 {
		t.Fatalf("%d attached rows copied more than once", twice)
	}
	if copied < attachedRows*3/4 {
		t.Fatalf("only %d attached rows copied", copied)
	}
	t.Logf("%d attached rows copied once each; %+v", copied, rep.TableReports)
}

// attachWorkload updates rows of m, the attached ones among them once
// they are attached, deletes some, and inserts new ones into 2024's
// partition (ids above 100,000) until stopped.
func attachWorkload(ctx context.Context, dsn string, stop chan struct{}) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(5))
	next := 100_000
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		id := 1 + rng.Intn(attachedRows)
		var err error
		switch rng.Intn(6) {
		case 0:
			_, err = conn.Exec(ctx, `INSERT INTO m VALUES ($1, date '2024-01-01' + $2::int, 'new', 0)`, next, rng.Intn(360))
			next++
		case 1:
			_, err = conn.Exec(ctx, `DELETE FROM m WHERE id = $1`, id)
		default:
			_, err = conn.Exec(ctx, `UPDATE m SET n = n + 1, v = 'upd' WHERE id = $1`, id)
		}
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}
