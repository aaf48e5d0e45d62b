package codec

import (
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkCanalRowAgainstEncodingJSON encodes inserts of a table of five
// columns (a key, an md5 text, a decimal, a datetime, a flag), as the
// snapshot and streaming benchmarks write them, by the hand-written
// encoder and, as the baseline, by encoding/json of the same message
// (the reference the encoder's tests hold it to, byte for byte); the
// two alternate each iteration. It reports ns a row of each and the
// encoder's speed against the baseline.
//
//	go test -run '^$' -bench CanalRowAgainstEncodingJSON ./internal/engine/sink/codec
func BenchmarkCanalRowAgainstEncodingJSON(b *testing.B) {
	def := &source.TableDef{Dialect: "mysql", Columns: []source.ColumnDef{
		{Name: "id", Type: "bigint(20)", KeyPos: 1}, {Name: "v", Type: "varchar(40)"}, {Name: "n", Type: "decimal(12,2)"},
		{Name: "at", Type: "datetime(6)"}, {Name: "flag", Type: "tinyint(4)"},
	}}
	const rows = 4096
	evs := make([]source.Event, rows)
	ts := model.TsFromTime(time.Now())
	for i := range evs {
		id := strconv.Itoa(i + 1)
		evs[i] = source.Event{Kind: source.KindDML, Table: "shop.bench", Def: def, Op: source.OpInsert, Key: id, CommitTs: ts + model.Ts(i/1000),
			New: []source.Value{source.Text(id), source.Text("35fafc97329b4ad6238034512f22a217"), source.Text(strconv.Itoa(i) + ".43"), source.Text("2026-12-08 00:39:58.709479"), source.Text(strconv.Itoa(i % 2))}}
	}
	var ours, base time.Duration
	buf := make([]byte, 0, 1024)
	for i := 0; i < b.N; i++ {
		sides := []func(){
			func() {
				began := time.Now()
				for j := range evs {
					buf = appendCanalRow(buf[:0], "shop", "bench", &evs[j], evs[j].New)
				}
				ours += time.Since(began)
			},
			func() {
				began := time.Now()
				for j := range evs {
					_ = reference(b, "shop", "bench", &evs[j], evs[j].New)
				}
				base += time.Since(began)
			},
		}
		sides[i%2]()
		sides[(i+1)%2]()
	}
	n := float64(rows * b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/n, "ns/row")
	b.ReportMetric(float64(base.Nanoseconds())/n, "json-ns/row")
	b.ReportMetric(base.Seconds()/ours.Seconds(), "speedup")
}
