package eventlog

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkTransactionsAgainstPlain measures what transaction boundaries
// (Options.Transactions: rows numbered, a summary per transaction) cost
// the event log: the same 20,000 transactions of five rows over two
// tables appended and read back by four spans, with and without, in
// alternating order in one run. It reports both rates and their ratio.
//
//	go test -run '^$' -bench TransactionsAgainstPlain -benchtime 5x -count 3 ./internal/engine/eventlog
func BenchmarkTransactionsAgainstPlain(b *testing.B) {
	const txns, perTxn = 20_000, 5
	var evs [][]source.Event
	for t := range txns {
		tx := make([]source.Event, perTxn)
		for i := range tx {
			e := row(model.Ts(10+t), fmt.Sprintf("%08d", (t*perTxn+i)*7919%1_000_000), source.OpUpdate, v1)
			if i%2 == 1 {
				e.Table = "public.u"
			}
			tx[i] = e
		}
		evs = append(evs, tx)
	}
	spans := []model.Span{{Table: "public.t", End: "00500000"}, {Table: "public.t", Start: "00500000"}, {Table: "public.u", End: "00500000"}, {Table: "public.u", Start: "00500000"}}
	run := func(o Options) time.Duration {
		l, err := Open("", 0, o)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		began := time.Now()
		for _, tx := range evs {
			if err := l.Append(tx); err != nil {
				b.Fatal(err)
			}
		}
		rows := 0
		for _, sp := range spans {
			cur := source.Cursor{}
			for {
				out, next, err := l.Read(sp, cur, model.Ts(10+txns), 1024)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range out {
					if e.Kind == source.KindDML {
						rows++
					}
				}
				if !cur.Before(next) {
					break
				}
				cur = next
			}
		}
		if rows != txns*perTxn {
			b.Fatalf("read %d rows, want %d", rows, txns*perTxn)
		}
		return time.Since(began)
	}
	run(Options{}) // warm: the first run pays for the process's first allocations
	var plain, txn time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			plain += run(Options{})
			txn += run(Options{Transactions: true})
		} else {
			txn += run(Options{Transactions: true})
			plain += run(Options{})
		}
	}
	n := float64(b.N * txns * perTxn)
	b.ReportMetric(n/plain.Seconds(), "plain-rows/s")
	b.ReportMetric(n/txn.Seconds(), "txn-rows/s")
	b.ReportMetric(plain.Seconds()/txn.Seconds(), "ratio")
}
