package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// benchRows is a fixed set of rows: 8 tables, read as 8 dispatchers.
func benchRows(b *testing.B, n int) [][]source.Event {
	g, err := gen.New(gen.Config{Tables: 8, Keys: 5000, Rate: 20000, Seed: 1, StartMillis: start})
	if err != nil {
		b.Fatal(err)
	}
	per := make([][]source.Event, 8)
	secs := int64(n/20000 + 1)
	for i, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		per[i] = sourcetest.Read(b, r, model.TsFromMillis(start+secs*1000), n/8)
	}
	return per
}

// BenchmarkStorageSink writes the same rows (canal-json, 8 dispatchers,
// 4 MiB files) through the storage sink and, as the baseline, encodes
// them and writes files of the same size straight to the same disk. It
// reports rows/s of both and their ratio, with the rows waiting in
// memory (the default spool) and on disk (spool=disk).
//
//	go test -run '^$' -bench StorageSink -benchtime 3x ./internal/engine/sink/storage
func BenchmarkStorageSink(b *testing.B) {
	per := benchRows(b, 200_000)
	b.Run("spool=memory", func(b *testing.B) { storageSinkRun(b, per, "") })
	b.Run("spool=disk", func(b *testing.B) { storageSinkRun(b, per, "&spool=disk&spool-dir="+b.TempDir()) })
}

func storageSinkRun(b *testing.B, per [][]source.Event, params string) {
	total := 0
	for _, p := range per {
		total += len(p)
	}
	var sinkTime, rawTime time.Duration
	sinkSide := func() time.Duration {
		dir := b.TempDir()
		begin := time.Now()
		s, err := storage.Open(context.Background(), "file://"+dir+"?file-size=4194304&flush-interval=1s"+params, quiet())
		if err != nil {
			b.Fatal(err)
		}
		writeAll(b, s, per)
		for d := range per {
			if err := s.Flush(context.Background(), fmt.Sprintf("d%d", d)); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
		return time.Since(begin)
	}
	rawSide := func() time.Duration {
		rawDir := b.TempDir()
		begin := time.Now()
		for d, evs := range per {
			var buf bytes.Buffer
			file := 0
			flush := func() {
				file++
				if err := os.WriteFile(filepath.Join(rawDir, fmt.Sprintf("d%d_%06d.json", d, file)), buf.Bytes(), 0o644); err != nil {
					b.Fatal(err)
				}
				buf.Reset()
			}
			for j := range evs {
				if err := codec.EncodeRow(&buf, codec.ProtocolCanalJSON, "gen", &evs[j]); err != nil {
					b.Fatal(err)
				}
				if buf.Len() >= 4<<20 {
					flush()
				}
			}
			if buf.Len() > 0 {
				flush()
			}
		}
		return time.Since(begin)
	}
	// Each side starts from the same state: no garbage and no dirty
	// pages of the other side's files (the disk's writeback of one
	// side's files slowed the next, and raw rates varied 1.0 to 2.7
	// million rows/s between runs). The order alternates.
	settle := func() { runtime.GC(); syscall.Sync() }
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			settle()
			sinkTime += sinkSide()
			settle()
			rawTime += rawSide()
		} else {
			settle()
			rawTime += rawSide()
			settle()
			sinkTime += sinkSide()
		}
	}
	sinkRate := float64(total*b.N) / sinkTime.Seconds()
	rawRate := float64(total*b.N) / rawTime.Seconds()
	b.ReportMetric(sinkRate, "sink-rows/s")
	b.ReportMetric(rawRate, "raw-rows/s")
	b.ReportMetric(sinkRate/rawRate, "sink/raw")
}

// writeAll writes each dispatcher's rows (d0, d1, ...) in batches of 256.
func writeAll(b *testing.B, s *storage.Sink, per [][]source.Event) {
	for d, evs := range per {
		id := fmt.Sprintf("d%d", d)
		for off := 0; off < len(evs); off += 256 {
			if err := s.Write(context.Background(), &sink.Batch{Dispatcher: id, Events: evs[off:min(off+256, len(evs))]}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// envInt is a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
