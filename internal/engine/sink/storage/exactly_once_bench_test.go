package storage_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// BenchmarkStorageExactlyOnce writes the same rows (8 dispatchers, in
// parallel, batches of 256, canal-json) into a local directory with
// delivery=exactly-once and, as the baseline, at-least-once, in the same
// run, alternating, each side after a GC and a sync. Exactly once costs
// writes per flush (the partition's progress object every progressEvery
// flushes, a note on each data file), so the cases differ in how many
// flushes there are: 4 MiB files, and a flush after every batch (the
// most flushes a dispatcher can ask for: 256 rows a file), also on S3
// (gofakes3, in this process: its HTTP and XML weigh more than a disk's
// writes). It reports rows/s of both and the ratio (issue 31's goal: at
// least 0.9).
//
//	go test -run '^$' -bench StorageExactlyOnce -benchtime 3x -count 3 ./internal/engine/sink/storage
func BenchmarkStorageExactlyOnce(b *testing.B) {
	per := benchRows(b, 800_000)
	local := func(b *testing.B) func(delivery string) string {
		return func(delivery string) string {
			return "file://" + b.TempDir() + "?file-size=4194304&flush-interval=1s&delivery=" + delivery
		}
	}
	b.Run("files=4MiB", func(b *testing.B) { storageDeliveryRun(b, per, 1, local(b)) })
	b.Run("files=one-per-batch", func(b *testing.B) { storageDeliveryRun(b, per, 4, local(b)) })
	b.Run("files=one-per-batch/s3", func(b *testing.B) {
		s3 := buckettest.Start(b)
		n := 0
		storageDeliveryRun(b, per, 16, func(delivery string) string {
			n++
			return s3.URI(fmt.Sprintf("run%d", n), "file-size=4194304&flush-interval=1s&delivery="+delivery)
		})
	})
}

// storageDeliveryRun writes 1/part of per's rows, a file per batch unless
// part is 1, into a new place of at for each side.
func storageDeliveryRun(b *testing.B, per [][]source.Event, part int, at func(delivery string) string) {
	flushEach := part > 1
	if flushEach {
		// A part of the rows: a file per batch is slow.
		some := make([][]source.Event, len(per))
		for i := range per {
			some[i] = per[i][:len(per[i])/part]
		}
		per = some
	}
	total := 0
	for _, p := range per {
		total += len(p)
	}
	side := func(delivery string) time.Duration {
		uri := at(delivery)
		runtime.GC()
		syscall.Sync()
		begin := time.Now()
		s, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Changefeed: "bench@1"})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for d, evs := range per {
			id, part := fmt.Sprintf("p%d.1", d), fmt.Sprintf("p%d", d)
			if _, _, err := s.Resume(ctx, sink.Writer{Dispatcher: id, Partition: part, Epoch: 1}); err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for off := 0; off < len(evs); off += 256 {
					batch := evs[off:min(off+256, len(evs))]
					if err := s.Write(ctx, &sink.Batch{Dispatcher: id, Epoch: 1, Events: batch, End: sink.Position{Ts: batch[len(batch)-1].CommitTs}}); err != nil {
						b.Error(err)
						return
					}
					if flushEach {
						if err := s.Flush(ctx, id); err != nil {
							b.Error(err)
							return
						}
					}
				}
				if err := s.Flush(ctx, id); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		s.Close()
		return time.Since(begin)
	}
	var onceTime, leastTime time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			onceTime += side(storage.DeliveryExactlyOnce)
			leastTime += side(storage.DeliveryAtLeastOnce)
		} else {
			leastTime += side(storage.DeliveryAtLeastOnce)
			onceTime += side(storage.DeliveryExactlyOnce)
		}
	}
	onceRate := float64(total*b.N) / onceTime.Seconds()
	leastRate := float64(total*b.N) / leastTime.Seconds()
	b.ReportMetric(onceRate, "exactly-once-rows/s")
	b.ReportMetric(leastRate, "at-least-once-rows/s")
	b.ReportMetric(onceRate/leastRate, "once/least")
}
