package storage_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkSparseTables is seed 004's fan-out case: N tables (100,000 by
// default; CDCCTL_BENCH_TABLES), one row each, each table its own
// dispatcher, written at CDCCTL_BENCH_RATE rows a second (5,000 by
// default) through the storage sink with flush-interval=5s into files
// on local disk. It measures each batch's ack latency (Write to
// OnFlushed) with max-flush-delay at its default (200ms) and, in the
// same run, with it off (the baseline: acks locked to the interval), and
// reports p50 and p99 of both, their p99 ratio, the process's peak RSS
// during each, and its RSS once state-ttl has passed (the per-table
// state reclaimed, the sink still open). CDCCTL_BENCH_BUCKET=mem://
// writes into memory instead of local disk.
//
//	go test -run '^$' -bench SparseTables -benchtime 1x ./internal/engine/sink/storage
func BenchmarkSparseTables(b *testing.B) {
	tables, rate := envInt("CDCCTL_BENCH_TABLES", 100_000), envInt("CDCCTL_BENCH_RATE", 5000)
	g, err := gen.New(gen.Config{Tables: tables, Keys: 1, Rate: float64(tables), Seed: 1, StartMillis: start})
	if err != nil {
		b.Fatal(err)
	}
	rows := make([][]source.Event, tables)
	for i, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		rows[i] = sourcetest.Read(b, r, model.TsFromMillis(start+2000), 1)
	}
	for i := 0; i < b.N; i++ {
		on, peakOn, after := sparseRun(b, rows, rate, "max-flush-delay=200ms&state-ttl=2s", true)
		off, peakOff, _ := sparseRun(b, rows, rate, "max-flush-delay=0s", false)
		b.ReportMetric(pct(on, 50).Seconds(), "delay-p50-s")
		b.ReportMetric(pct(on, 99).Seconds(), "delay-p99-s")
		b.ReportMetric(pct(off, 50).Seconds(), "tick-p50-s")
		b.ReportMetric(pct(off, 99).Seconds(), "tick-p99-s")
		b.ReportMetric(pct(off, 99).Seconds()/pct(on, 99).Seconds(), "p99-tick/delay")
		b.ReportMetric(float64(peakOn)/(1<<20), "delay-peak-rss-MiB")
		b.ReportMetric(float64(peakOff)/(1<<20), "tick-peak-rss-MiB")
		b.ReportMetric(float64(after)/(1<<20), "rss-after-ttl-MiB")
	}
}

// sparseRun writes one row per table at rate rows a second and waits for
// every ack; it returns the latencies, the peak RSS while it ran and, if
// wait, the RSS after the sink's state TTL passed with the sink still
// open.
func sparseRun(b *testing.B, rows [][]source.Event, rate int, params string, wait bool) ([]time.Duration, uint64, uint64) {
	b.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if h := rssBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// CDCCTL_BENCH_BUCKET=mem:// takes the file system out (the bucket's
	// contents then count in the RSS).
	bucketURL := "file://" + b.TempDir()
	if os.Getenv("CDCCTL_BENCH_BUCKET") == "mem://" {
		bucketURL = "mem://"
	}
	s, err := storage.Open(context.Background(), bucketURL+"?flush-interval=5s&"+params, quiet())
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, len(rows))
	var done sync.WaitGroup
	done.Add(len(rows))
	paced := time.Now()
	for i, evs := range rows {
		if due := paced.Add(time.Duration(i) * time.Second / time.Duration(rate)); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
		began := time.Now()
		err := s.Write(context.Background(), &sink.Batch{Dispatcher: fmt.Sprintf("d%d", i), Epoch: 1, Events: evs, OnFlushed: func(err error) {
			if err != nil {
				b.Error(err)
			}
			lat[i] = time.Since(began)
			done.Done()
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	done.Wait()
	close(stop)
	sampler.Wait()
	var after uint64
	if wait {
		time.Sleep(3 * time.Second) // past state-ttl=2s and a sweep
		// The flusher forgets idle partitions on its rounds.
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		debug.FreeOSMemory()
		after = rssBytes()
	}
	s.Close()
	slices.Sort(lat)
	return lat, peak.Load(), after
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// rssBytes is the process's resident set (VmRSS).
func rssBytes() uint64 {
	body, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
