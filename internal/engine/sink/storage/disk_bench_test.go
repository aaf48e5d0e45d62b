package storage_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// BenchmarkDiskSpool writes a backlog the sink must hold (the same rows
// as BenchmarkStorageSink, no file full and no interval reached until
// the end, as when the bucket is slower than the source) through the
// memory spool and the disk spool in the same run. It reports rows/s of
// both, their ratio, and the live heap the sink holds with the backlog
// (the heap then, less the heap before the sink opened).
//
//	go test -run '^$' -bench DiskSpool -benchtime 3x ./internal/engine/sink/storage
func BenchmarkDiskSpool(b *testing.B) {
	per := benchRows(b, 200_000)
	total := 0
	for _, p := range per {
		total += len(p)
	}
	const params = "?file-size=268435456&flush-interval=10m&max-flush-delay=0s&spool-max-bytes=536870912&max-buffered-bytes=536870912"
	var took [2]time.Duration
	var heap [2]uint64
	for i := 0; i < b.N; i++ {
		for k, extra := range []string{"", "&spool=disk&spool-dir=" + b.TempDir()} {
			if i%2 == 1 {
				k = 1 - k // alternate which goes first
				extra = []string{"", "&spool=disk&spool-dir=" + b.TempDir()}[k]
			}
			d, h := spoolRun(b, per, "file://"+b.TempDir()+params+extra)
			took[k] += d
			heap[k] = max(heap[k], h)
		}
	}
	mem := float64(total*b.N) / took[0].Seconds()
	disk := float64(total*b.N) / took[1].Seconds()
	b.ReportMetric(mem, "memory-rows/s")
	b.ReportMetric(disk, "disk-rows/s")
	b.ReportMetric(disk/mem, "disk/memory")
	b.ReportMetric(float64(heap[0])/(1<<20), "memory-heap-MiB")
	b.ReportMetric(float64(heap[1])/(1<<20), "disk-heap-MiB")
}

// spoolRun writes every row, measures the live heap holding them, then
// flushes them all; it returns the time taken and that heap.
func spoolRun(b *testing.B, per [][]source.Event, uri string) (time.Duration, uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc // the rows to write
	begin := time.Now()
	s, err := storage.Open(context.Background(), uri, quiet())
	if err != nil {
		b.Fatal(err)
	}
	writeAll(b, s, per)
	paused := time.Now()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	begin = begin.Add(time.Since(paused)) // the measurement is not the sink's time
	for d := range per {
		if err := s.Flush(context.Background(), fmt.Sprintf("d%d", d)); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	return time.Since(begin), ms.HeapAlloc - min(base, ms.HeapAlloc)
}
