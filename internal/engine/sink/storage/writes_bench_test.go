package storage_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkObjectWrites makes the storage sink's small-file amplification
// on object storage visible: 200 tables (CDCCTL_BENCH_TABLES), each
// changed 10 times a second (CDCCTL_BENCH_TABLE_RATE) for 10 seconds,
// written through the sink into S3 (gofakes3, in process) with
// flush-interval=5s: once with max-flush-delay at its default (200ms),
// once with it off (acks locked to the interval), in the same run. It
// counts the objects written (PUTs of data, index and schema files), the
// flushes by reason, and the ack latency of each, and reports data files
// per 1,000 rows for both and their ratio: what the shorter acks cost in
// requests.
//
//	go test -run '^$' -bench ObjectWrites -benchtime 1x ./internal/engine/sink/storage
func BenchmarkObjectWrites(b *testing.B) {
	tables, perTable := envInt("CDCCTL_BENCH_TABLES", 200), envInt("CDCCTL_BENCH_TABLE_RATE", 10)
	const seconds = 10
	g := newGen(b, gen.Config{Tables: tables, Keys: 50, Rate: float64(tables * perTable), Seed: 3})
	rows := make([][]source.Event, tables)
	for i, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		rows[i] = sourcetest.Read(b, r, model.TsFromMillis(start+seconds*1000), perTable*seconds)
	}
	files := map[string]float64{}
	for i := 0; i < b.N; i++ {
		for _, run := range []struct{ name, params string }{{"delay", "max-flush-delay=200ms"}, {"tick", "max-flush-delay=0s"}} {
			rec, base := startRecordedS3(b)
			m := newCounts()
			s, err := storage.OpenWith(context.Background(), base+"&flush-interval=5s&"+run.params, quiet(), storage.Env{Metrics: m})
			if err != nil {
				b.Fatal(err)
			}
			lat := writePaced(b, s, rows, perTable)
			s.Close()
			data, paths := rec.count("PUT", ".json")
			for _, p := range paths {
				if strings.Contains(p, "/meta/schema_") {
					data-- // a schema file, not a data file
				}
			}
			index, _ := rec.count("PUT", ".index")
			total := 0
			for _, r := range rows {
				total += len(r)
			}
			files[run.name] = float64(data) * 1000 / float64(total)
			b.ReportMetric(files[run.name], run.name+"-data-files/1000rows")
			b.ReportMetric(float64(index)*1000/float64(total), run.name+"-index-writes/1000rows")
			b.ReportMetric(pct(lat, 50).Seconds(), run.name+"-ack-p50-s")
			b.ReportMetric(pct(lat, 99).Seconds(), run.name+"-ack-p99-s")
			for _, r := range []string{storage.ReasonSize, storage.ReasonInterval, storage.ReasonDelay, storage.ReasonFanout, storage.ReasonBytesCap, storage.ReasonForced, storage.ReasonDDL} {
				if n := m.reason(r); n > 0 {
					b.ReportMetric(float64(n), run.name+"-flushes-"+r)
				}
			}
		}
	}
	b.ReportMetric(files["delay"]/files["tick"], "data-files-delay/tick")
}

// writePaced writes each table's rows, one at a time, perTable a second
// per table, spread evenly; it waits for every ack and returns the
// latencies, sorted.
func writePaced(b *testing.B, s *storage.Sink, rows [][]source.Event, perTable int) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var done sync.WaitGroup
	began := time.Now()
	n := len(rows)
	for step := 0; step < len(rows[0]); step++ {
		for i := range rows {
			if step >= len(rows[i]) {
				continue
			}
			due := began.Add(time.Duration(step*n+i) * time.Second / time.Duration(n*perTable))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			done.Add(1)
			at := time.Now()
			err := s.Write(context.Background(), &sink.Batch{Dispatcher: fmt.Sprintf("d%d", i), Epoch: 1, Events: rows[i][step : step+1], OnFlushed: func(err error) {
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				lat = append(lat, time.Since(at))
				mu.Unlock()
				done.Done()
			}})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range rows {
		_ = s.Flush(context.Background(), fmt.Sprintf("d%d", i))
	}
	done.Wait()
	slices.Sort(lat)
	return lat
}
