package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkTransactionMetaAgainstPlain measures what transaction-meta
// costs the whole data path (BenchmarkSourceAgainstBareReader's: the
// binary log decoded, the event log, a partition's read-back, canal-json
// into files): the same binary log read through it with transaction
// boundaries and, as the baseline, without, alternating which goes
// first. Small transactions pay most (a summary in the log, two records
// in the sink per transaction), so it runs 1,000 rows and 10 rows to a
// transaction.
//
//	go test -run '^$' -bench TransactionMetaAgainstPlain -benchtime 4x -count 3 ./internal/engine/source/mysql
func BenchmarkTransactionMetaAgainstPlain(b *testing.B) {
	for _, c := range []struct{ rows, perTxn int }{{200_000, 1000}, {50_000, 10}} {
		b.Run(fmt.Sprintf("rows-per-txn=%d", c.perTxn), func(b *testing.B) {
			_, db, cfg := streamBench(b)
			var with, without time.Duration
			for i := 0; i < b.N; i++ {
				cfg.Start = model.TsFromTime(time.Now())
				from, err := mysql.Begin(context.Background(), cfg, cfg.Start)
				if err != nil {
					b.Fatal(err)
				}
				insertRows(b, db, i*c.rows, c.rows, c.perTxn)
				run := func(meta bool, total *time.Duration) {
					began := time.Now()
					if got := throughTheSource(b, cfg, from, b.TempDir(), c.rows, meta, eventlog.NewMemory(eventlog.DefaultMemory)); got != c.rows {
						b.Fatalf("the source delivered %d rows, want %d (transaction-meta %v)", got, c.rows, meta)
					}
					*total += time.Since(began)
				}
				if i%2 == 0 {
					run(true, &with)
					run(false, &without)
				} else {
					run(false, &without)
					run(true, &with)
				}
			}
			n := float64(c.rows * b.N)
			b.ReportMetric(n/with.Seconds(), "with-rows/s")
			b.ReportMetric(n/without.Seconds(), "without-rows/s")
			b.ReportMetric(without.Seconds()/with.Seconds(), "with/without")
		})
	}
}
