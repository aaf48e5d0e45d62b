package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkCatchUpThroughTheEngine measures streaming as a node does it:
// a changefeed of one table (one partition, one capture of the engine's
// in-process cluster, a file sink flushed every 100 ms) is paused while
// 400,000 rows are committed in transactions of 1,000, then resumed; the
// time from the resume until its checkpoint passes the last commit is
// the catch-up, through the reader, the event log, the dispatcher, the
// sink and the checkpoint. The baseline, in the same iteration (the
// order alternating), is the bare pglogrepl reader of
// BenchmarkSourceAgainstBareReader on a slot made at the same point,
// over the same WAL.
//
//	go test -run '^$' -bench CatchUpThroughTheEngine -benchtime 3x ./internal/engine/source/postgres
func BenchmarkCatchUpThroughTheEngine(b *testing.B) {
	const rows, perTxn = 400_000, 1000
	ctx := context.Background()
	srv := postgres.StartDB(b, "bench")
	dsn := srv.DSN("bench")
	tc := enginetest.New(b, enginetest.Options{LogMemory: eventlog.DefaultMemory}) // as an agent keeps its logs
	tc.StartCaptures(1)
	var ours, bare time.Duration
	for i := 0; i < b.N; i++ {
		table := fmt.Sprintf("t%d", i)
		if _, err := srv.Psql(ctx, "bench", "CREATE TABLE "+table+" (id int8 PRIMARY KEY, v text, n numeric(12,2), at timestamptz, flag bool)"); err != nil {
			b.Fatal(err)
		}
		cf := model.ChangefeedID(fmt.Sprintf("catch-%d", i))
		tc.CreateChangefeed(string(cf), dsn+"&tables=public."+table, "file://"+b.TempDir()+"?flush-interval=100ms", 1)
		tc.WaitSnapshot(cf)
		base, err := postgres.ParseURI(dsn + "&tables=public." + table)
		if err != nil {
			b.Fatal(err)
		}
		base = base.WithNames(fmt.Sprintf("bare_%d", i))
		up, err := postgres.Prepare(ctx, base)
		if err != nil {
			b.Fatal(err)
		}
		tc.SetState(cf, model.ChangefeedPaused)
		time.Sleep(time.Second) // the reader stops
		if _, err := srv.Psql(ctx, "bench", fmt.Sprintf(`DO $$ BEGIN FOR t IN 0..%d LOOP
			INSERT INTO %s SELECT g, md5(g::text), g / 7.0, now(), g %% 2 = 0 FROM generate_series(t * %d + 1, (t + 1) * %d) g;
			COMMIT; END LOOP; END $$`, rows/perTxn-1, table, perTxn, perTxn)); err != nil {
			b.Fatal(err)
		}
		end := model.TsFromTime(time.Now())
		runOurs := func() {
			began := time.Now()
			tc.SetState(cf, model.ChangefeedNormal)
			for tc.Changefeed(cf).Status.CheckpointTs <= end {
				if time.Since(began) > 5*time.Minute {
					b.Fatalf("%s did not catch up in 5 minutes", cf)
				}
				time.Sleep(20 * time.Millisecond)
			}
			ours += time.Since(began)
		}
		runBare := func() {
			began := time.Now()
			if got := postgres.BareRead(b, base, up.StartLSN, rows); got != rows {
				b.Fatalf("the bare reader decoded %d rows, want %d", got, rows)
			}
			bare += time.Since(began)
		}
		if i%2 == 0 {
			runOurs()
			runBare()
		} else {
			runBare()
			runOurs()
		}
		tc.RemoveChangefeed(cf)
		_ = postgres.Remove(ctx, base)
	}
	n := float64(rows * b.N)
	b.ReportMetric(n/ours.Seconds(), "rows/s")
	b.ReportMetric(n/bare.Seconds(), "bare-rows/s")
	b.ReportMetric(bare.Seconds()/ours.Seconds(), "ratio")
}
