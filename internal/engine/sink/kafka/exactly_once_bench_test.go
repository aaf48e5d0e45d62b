package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkExactlyOnce sends the same rows through the Kafka sink with
// delivery=exactly-once and, as the baseline, at-least-once, as eight
// dispatchers (one per partition of a changefeed's table ranges) writing
// batches of 256 at once, each waiting for its flush acks; each side on
// a fresh kfake broker, after a GC, in alternating order. It reports
// messages/s of both and the ratio (issue 31's goal: at least 0.7).
// CDCCTL_BENCH_SECONDS (10) is how many seconds of the generator's
// 20,000 changes a second are handed over: the last transaction's commit
// is a fixed cost the at-least-once side does not pay, which weighs on
// short runs (3 s: 0.59-0.71; 10 s: 0.79-0.81 here).
//
//	go test -run '^$' -bench ExactlyOnce -benchtime 2x -count 3 ./internal/engine/sink/kafka
func BenchmarkExactlyOnce(b *testing.B) {
	const start = int64(1_800_000_000_000)
	const dispatchers = 8
	seconds := benchEnv("CDCCTL_BENCH_SECONDS", 10)
	g, _ := gen.New(gen.Config{Tables: dispatchers, Keys: 5000, Rate: 20000, Seed: 1, StartMillis: start})
	var streams [][]source.Event
	for _, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		streams = append(streams, sourcetest.Read(b, r, model.TsFromMillis(start+int64(seconds)*1000), 20_000*seconds/dispatchers))
	}
	events := 0
	for _, s := range streams {
		events += len(s)
	}
	var onceTime, leastTime time.Duration
	for i := 0; i < b.N; i++ {
		sides := []func(){
			func() { onceTime += benchDelivery(b, "delivery=exactly-once", streams) },
			func() { leastTime += benchDelivery(b, "delivery=at-least-once", streams) },
		}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			runtime.GC()
			side()
		}
	}
	onceRate := float64(events*b.N) / onceTime.Seconds()
	leastRate := float64(events*b.N) / leastTime.Seconds()
	b.ReportMetric(onceRate, "exactly-once-msgs/s")
	b.ReportMetric(leastRate, "at-least-once-msgs/s")
	b.ReportMetric(onceRate/leastRate, "once/least")
}

// benchDelivery writes each stream as one dispatcher, all at once, and
// waits until every dispatcher's rows are durable.
func benchDelivery(b *testing.B, query string, streams [][]source.Event) time.Duration {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := kafka.Open(context.Background(), fmt.Sprintf("kafka://%s/bench?%s", c.ListenAddrs()[0], query), quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for d := range streams {
		if _, _, err := s.Resume(ctx, sink.Writer{Dispatcher: fmt.Sprintf("p%d.1", d), Partition: fmt.Sprintf("p%d", d), Epoch: 1}); err != nil {
			b.Fatal(err)
		}
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for d, evs := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("p%d.1", d)
			for off := 0; off < len(evs); off += 256 {
				batch := evs[off:min(off+256, len(evs))]
				end := sink.Position{Ts: batch[len(batch)-1].CommitTs}
				if err := s.Write(ctx, &sink.Batch{Dispatcher: id, Epoch: 1, Events: batch, End: end}); err != nil {
					b.Error(err)
					return
				}
			}
			if err := s.Flush(ctx, id); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	return time.Since(begin)
}

// BenchmarkCatchUpAfterACrash measures what a crash costs each delivery:
// eight partitions wrote 10 s of the generator's load (200,000 rows)
// and crashed with their persisted checkpoints 5 s behind; their next
// owners (a new sink) resume and write up to where they were. At least
// once writes the last 5 s again; exactly once asks the sink where each
// partition stands (fencing its producer, reading its progress record)
// and writes nothing again. Reported: each side's catch-up time, from
// the first resume to the last flush, and the rows written again.
//
//	go test -run '^$' -bench CatchUpAfterACrash -benchtime 3x -count 2 ./internal/engine/sink/kafka
func BenchmarkCatchUpAfterACrash(b *testing.B) {
	const start = int64(1_800_000_000_000)
	const dispatchers = 8
	g, _ := gen.New(gen.Config{Tables: dispatchers, Keys: 5000, Rate: 20000, Seed: 1, StartMillis: start})
	var streams [][]source.Event
	for _, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		streams = append(streams, sourcetest.Read(b, r, model.TsFromMillis(start+10_000), 200_000/dispatchers))
	}
	persisted := model.TsFromMillis(start + 5_000)
	var times [2]time.Duration
	var again [2]int
	for i := 0; i < b.N; i++ {
		for k, query := range []string{"delivery=exactly-once", "delivery=at-least-once"} {
			if i%2 == 1 {
				k = 1 - k
				query = []string{"delivery=exactly-once", "delivery=at-least-once"}[k]
			}
			runtime.GC()
			d, n := benchCatchUp(b, query, streams, persisted)
			times[k] += d
			again[k] += n
		}
	}
	b.ReportMetric(float64(times[0].Milliseconds())/float64(b.N), "exactly-once-catch-up-ms")
	b.ReportMetric(float64(times[1].Milliseconds())/float64(b.N), "at-least-once-catch-up-ms")
	b.ReportMetric(float64(again[0])/float64(b.N), "exactly-once-rows-again")
	b.ReportMetric(float64(again[1])/float64(b.N), "at-least-once-rows-again")
}

// benchCatchUp writes every stream (untimed), then resumes each on a new
// sink from persisted, or where the sink says, and writes the rest
// (timed); it returns the time and the rows written again.
func benchCatchUp(b *testing.B, query string, streams [][]source.Event, persisted model.Ts) (time.Duration, int) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	uri := fmt.Sprintf("kafka://%s/bench?%s", c.ListenAddrs()[0], query)
	ctx := context.Background()
	write := func(s *kafka.Sink, id string, evs []source.Event) error {
		for off := 0; off < len(evs); off += 256 {
			batch := evs[off:min(off+256, len(evs))]
			if err := s.Write(ctx, &sink.Batch{Dispatcher: id, Epoch: 1, Events: batch, End: sink.Position{Ts: batch[len(batch)-1].CommitTs}}); err != nil {
				return err
			}
		}
		return s.Flush(ctx, id)
	}
	first, err := kafka.Open(ctx, uri, quiet())
	if err != nil {
		b.Fatal(err)
	}
	for d, evs := range streams {
		if _, _, err := first.Resume(ctx, sink.Writer{Dispatcher: fmt.Sprintf("p%d.1", d), Partition: fmt.Sprintf("p%d", d), Epoch: 1}); err != nil {
			b.Fatal(err)
		}
		if err := write(first, fmt.Sprintf("p%d.1", d), evs); err != nil {
			b.Fatal(err)
		}
	}
	first.Close()
	heir, err := kafka.Open(ctx, uri, quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer heir.Close()
	begin := time.Now()
	var mu sync.Mutex
	again := 0
	var wg sync.WaitGroup
	for d, evs := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := persisted
			id := fmt.Sprintf("p%d.2", d)
			at, ok, err := heir.Resume(ctx, sink.Writer{Dispatcher: id, Partition: fmt.Sprintf("p%d", d), Epoch: 2})
			if err != nil {
				b.Error(err)
				return
			}
			if ok && at.Ts > from {
				from = at.Ts
			}
			i := 0
			for i < len(evs) && evs[i].CommitTs <= from {
				i++
			}
			if err := write(heir, id, evs[i:]); err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			again += len(evs) - i
			mu.Unlock()
		}()
	}
	wg.Wait()
	return time.Since(begin), again
}
