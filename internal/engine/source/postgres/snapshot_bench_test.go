package postgres_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkSnapshotThroughTheEngine measures the initial snapshot's rows/s
// as an operator meets it — a changefeed of one table cut into four
// partitions on two captures, each copying its key range in chunks
// between watermarks, into a file sink — from the changefeed's creation
// until its status says every partition has copied, against, as the
// baseline, COPY ... TO STDOUT of the same table read by one client.
// BenchmarkSnapshotAgainstCopy measures the source's share alone.
//
//	go test -run '^$' -bench SnapshotThroughTheEngine -benchtime 3x ./internal/engine/source/postgres
func BenchmarkSnapshotThroughTheEngine(b *testing.B) {
	const rows = 1_000_000
	ctx := context.Background()
	srv := postgres.StartDB(b, "bench")
	if _, err := srv.Psql(ctx, "bench", fmt.Sprintf(`CREATE TABLE snap (id int8 PRIMARY KEY, v text, n numeric(12,2), at timestamptz, flag bool);
		INSERT INTO snap SELECT g, md5(g::text), g / 7.0, now(), g %% 2 = 0 FROM generate_series(1, %d) g; ANALYZE snap`, rows)); err != nil {
		b.Fatal(err)
	}
	dsn := srv.DSN("bench")
	tc := enginetest.New(b, enginetest.Options{LogMemory: eventlog.DefaultMemory}) // as an agent keeps its logs
	tc.StartCaptures(2)
	var ours, flat time.Duration
	for i := 0; i < b.N; i++ {
		conn, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now() // connected: only the reading is timed
		if _, err := conn.CopyTo(ctx, io.Discard, "COPY public.snap TO STDOUT"); err != nil {
			b.Fatal(err)
		}
		flat += time.Since(began)
		_ = conn.Close(ctx)

		ours += tc.TimeSnapshot(model.ChangefeedID(fmt.Sprintf("snap-%d", i)), dsn+"&tables=public.snap", b.TempDir(), 4, rows)
	}
	n := float64(rows * b.N)
	b.ReportMetric(n/ours.Seconds(), "rows/s")
	b.ReportMetric(n/flat.Seconds(), "copy-rows/s")
	b.ReportMetric(flat.Seconds()/ours.Seconds(), "ratio")
}
