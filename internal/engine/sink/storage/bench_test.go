package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
// them and writes files of the same size straight to the same disk. Both
// sides write with the same parallelism, as a node's dispatchers do: one
// goroutine per dispatcher, all at once (the baseline wrote one file at
// a time while the sink wrote eight dispatchers' at once). One pair of
// runs warms the process and is not counted; then each iteration runs
// both sides, the order alternating, and the benchmark reports the
// median of the iterations' rates and ratios, and the ratios' range. It
// runs with the rows waiting in memory (the default spool), on disk
// (spool=disk), and in their files' temporary files (spool=bucket).
//
//	go test -run '^$' -bench StorageSink -benchtime 5x ./internal/engine/sink/storage
func BenchmarkStorageSink(b *testing.B) {
	per := benchRows(b, 200_000)
	b.Run("spool=memory", func(b *testing.B) { storageSinkRun(b, per, "") })
	b.Run("spool=disk", func(b *testing.B) { storageSinkRun(b, per, "&spool=disk&spool-dir="+b.TempDir()) })
	b.Run("spool=bucket", func(b *testing.B) { storageSinkRun(b, per, "&spool=bucket") })
}

func storageSinkRun(b *testing.B, per [][]source.Event, params string) {
	ctx := context.Background()
	total := 0
	for _, p := range per {
		total += len(p)
	}
	// One sink for the whole run, as a node keeps one per changefeed: its
	// buffers are warm after the first pair, as they are in a node that
	// has been writing (a sink opened for each iteration allocated and
	// cleared them every time). Each iteration's dispatchers are new
	// ones, so that no dispatcher writes positions it has written.
	s, err := storage.Open(ctx, "file://"+b.TempDir()+"?file-size=4194304&flush-interval=1s"+params, quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	round := 0
	sinkSide := func() time.Duration {
		round++
		begin := time.Now()
		eachDispatcher(b, per, func(d int, evs []source.Event) error {
			id := fmt.Sprintf("r%d-d%d", round, d)
			for off := 0; off < len(evs); off += 256 {
				if err := s.Write(ctx, &sink.Batch{Dispatcher: id, Events: evs[off:min(off+256, len(evs))]}); err != nil {
					return err
				}
			}
			return s.Flush(ctx, id)
		})
		return time.Since(begin)
	}
	rawSide := func() time.Duration {
		rawDir := b.TempDir()
		begin := time.Now()
		eachDispatcher(b, per, func(d int, evs []source.Event) error {
			// Rows encoded into a 256 KiB buffer written out as it fills,
			// a new file every 4 MiB: the least a writer of these files
			// does (a whole file's buffer grown and written at once was
			// slower than the sink, which writes its batches' chunks).
			var buf bytes.Buffer
			buf.Grow(256<<10 + 64<<10)
			var f *os.File
			file, size := 0, 0
			write := func() error {
				if f == nil {
					file++
					var err error
					if f, err = os.Create(filepath.Join(rawDir, fmt.Sprintf("d%d_%06d.json", d, file))); err != nil {
						return err
					}
				}
				n, err := f.Write(buf.Bytes())
				buf.Reset()
				if size += n; err == nil && size >= 4<<20 {
					err, f, size = closeDurably(f, rawDir), nil, 0
				}
				return err
			}
			for j := range evs {
				if err := codec.EncodeRow(&buf, codec.ProtocolCanalJSON, "gen", &evs[j]); err != nil {
					return err
				}
				if buf.Len() >= 256<<10 {
					if err := write(); err != nil {
						return err
					}
				}
			}
			if buf.Len() > 0 {
				if err := write(); err != nil {
					return err
				}
			}
			if f != nil {
				return closeDurably(f, rawDir)
			}
			return nil
		})
		return time.Since(begin)
	}
	// Each side starts from the same state: no garbage and no dirty
	// pages of the other side's files (the disk's writeback of one
	// side's files slowed the next, and raw rates varied 1.0 to 2.7
	// million rows/s between runs).
	settle := func() { runtime.GC(); syscall.Sync() }
	// Warm: a process's first repetition of either side ran cold (its
	// ratio was above 1 only then).
	settle()
	sinkSide()
	settle()
	rawSide()
	b.ResetTimer()
	var sinkRates, rawRates, ratios []float64
	for i := 0; i < b.N; i++ {
		var st, rt time.Duration
		if i%2 == 0 {
			settle()
			st = sinkSide()
			settle()
			rt = rawSide()
		} else {
			settle()
			rt = rawSide()
			settle()
			st = sinkSide()
		}
		sinkRates = append(sinkRates, float64(total)/st.Seconds())
		rawRates = append(rawRates, float64(total)/rt.Seconds())
		ratios = append(ratios, rt.Seconds()/st.Seconds())
	}
	b.ReportMetric(median(sinkRates), "sink-rows/s")
	b.ReportMetric(median(rawRates), "raw-rows/s")
	b.ReportMetric(median(ratios), "sink/raw")
	b.ReportMetric(slices.Min(ratios), "sink/raw-min")
	b.ReportMetric(slices.Max(ratios), "sink/raw-max")
}

// eachDispatcher runs write for every dispatcher's rows at once, one
// goroutine each, and fails b with the first error.
func eachDispatcher(b *testing.B, per [][]source.Event, write func(d int, evs []source.Event) error) {
	errs := make(chan error, len(per))
	for d, evs := range per {
		go func() { errs <- write(d, evs) }()
	}
	var first error
	for range per {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		b.Fatal(first)
	}
}

// median of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
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

// closeDurably closes a file of the raw writes as the sink's file://
// bucket does (its fsync, the default): the file synced, then its
// directory.
func closeDurably(f *os.File, dir string) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
