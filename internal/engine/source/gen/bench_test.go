package gen

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkReadSpan backs the claim that a partition's reading cost is
// proportional to its own events: it reads 10 s of one table whole and as
// one eighth of its key range, in the same run, and reports the ratio of
// the two times (ideal: 0.125) and ns per event of each.
//
//	go test -run '^$' -bench ReadSpan ./internal/engine/source/gen
func BenchmarkReadSpan(b *testing.B) {
	g := newGen(b, "gen://?tables=8&keys=20000&rate=16000")
	whole := model.Span{Table: "t0003"}
	bounds := g.KeyBoundaries(8)
	eighth := model.Span{Table: "t0003", Start: bounds[3], End: bounds[4]}
	upTo := at(10)
	measure := func(span model.Span) (time.Duration, int) {
		begin := time.Now()
		r, err := g.Open(span, at(0))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			evs := sourcetest.Read(b, r, upTo, 4096)
			if len(evs) == 0 {
				break
			}
			n += len(evs)
		}
		return time.Since(begin), n
	}
	var tWhole, tEighth time.Duration
	var nWhole, nEighth int
	for i := 0; i < b.N; i++ {
		d, n := measure(whole)
		tWhole, nWhole = tWhole+d, nWhole+n
		d, n = measure(eighth)
		tEighth, nEighth = tEighth+d, nEighth+n
	}
	b.ReportMetric(float64(tEighth)/float64(tWhole), "eighth/whole")
	b.ReportMetric(float64(nEighth)/float64(nWhole), "events-eighth/whole")
	b.ReportMetric(float64(tWhole)/float64(nWhole), "ns/event-whole")
	b.ReportMetric(float64(tEighth)/float64(nEighth), "ns/event-eighth")
}
