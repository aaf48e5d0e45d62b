package changefeeds

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// The initial snapshot of a table whose bodies are stored out of line
// (TOAST), on two captures into CSV, while a workload updates only the
// rows' small column: the updates that fall between a chunk's watermarks
// leave the bodies out, and the chunk drops those rows. The tables
// rebuilt from the sink still equal the upstream's, bodies included:
// the chunk gave what the updates left out. (Without it, the CI's
// runbook once found five of twenty rows without their body.)
func TestTheSnapshotGivesTheToastedValuesOfRowsUpdatedWhileCopied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "docs")
	if _, err := srv.Psql(ctx, "docs", `
CREATE TABLE docs (id int8 PRIMARY KEY, n int4, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO docs SELECT g, 0, (SELECT string_agg(md5(g::text || h::text), '') FROM generate_series(1, 80) h) FROM generate_series(1, 1500) g;`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("docs")
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("pg", dsn+"&tables=public.docs&chunk-rows=20", "file://"+t.TempDir()+"?protocol=csv&flush-interval=100ms", 2)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A fiftieth of the rows, spread over every chunk.
			if _, err := conn.Exec(ctx, `UPDATE docs SET n = n + 1 WHERE id % 50 = $1`, n%50); err != nil {
				t.Error(err)
				return
			}
			n++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	tc.WaitSnapshot("pg")
	close(stop)
	updates := <-done
	up, err := postgres.NewTableReader(dsn + "&tables=public.docs")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.docs"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || updates < 10 {
		t.Fatalf("after %d updates during the snapshot: %+v", updates, rep)
	}
	t.Logf("%d updates of 30 rows each during the snapshot; %+v", updates, rep.TableReports)
}
