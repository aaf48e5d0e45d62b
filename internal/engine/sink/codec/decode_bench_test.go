package codec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkDecodeChanges measures reading a canal-json data file back
// (what verify does with every file of a sink) against, as the baseline,
// decoding each line into the whole canal-json message, as it did
// before it skipped what it does not use. The two alternate; it reports
// both and their ratio.
//
//	go test -run '^$' -bench DecodeChanges -benchtime 20x ./internal/engine/sink/codec
func BenchmarkDecodeChanges(b *testing.B) {
	const rows = 20_000
	var buf bytes.Buffer
	for i := 0; i < rows; i++ {
		id := strconv.Itoa(i)
		e := &source.Event{Kind: source.KindDML, Op: source.OpInsert, Table: "shop.orders", Def: orders, CommitTs: model.Ts(i + 1),
			New: []source.Value{source.Text("eu"), source.Text(id), source.Text("12.50"), source.Text("true"), source.Null}}
		if err := EncodeRow(&buf, ProtocolCanalJSON, "sinkdb", e); err != nil {
			b.Fatal(err)
		}
	}
	data := buf.Bytes()
	var ours, whole time.Duration
	for i := 0; i < b.N; i++ {
		runOurs := func() {
			began := time.Now()
			got, err := DecodeChanges(ProtocolCanalJSON, data)
			if err != nil || len(got) != rows {
				b.Fatalf("%d changes, %v", len(got), err)
			}
			ours += time.Since(began)
		}
		runWhole := func() {
			began := time.Now()
			n := 0
			for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
				var m canalRow
				if err := json.Unmarshal(line, &m); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != rows {
				b.Fatalf("%d rows", n)
			}
			whole += time.Since(began)
		}
		if i%2 == 0 {
			runOurs()
			runWhole()
		} else {
			runWhole()
			runOurs()
		}
	}
	b.ReportMetric(float64(rows*b.N)/ours.Seconds(), "rows/s")
	b.ReportMetric(float64(rows*b.N)/whole.Seconds(), "whole-rows/s")
	b.ReportMetric(whole.Seconds()/ours.Seconds(), "speedup")
}
