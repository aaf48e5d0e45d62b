package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkCatchUpAfterAFault measures, in one run, how long after a
// broker fault ends the dispatchers have caught up (every checkpoint past
// the moment the fault ended), under two remedies for a failed delivery:
//
//   - dispatcher: only the failed dispatcher is re-created from its
//     checkpoint (seed 002's recovery, without the maintainer's round
//     trip of about one heartbeat);
//   - changefeed: every dispatcher stops, the producer is closed and
//     opened again, and all start from their checkpoints (the changefeed
//     restart that recovery replaces).
//
// Eight tables, one Kafka partition each (partition=table), three
// brokers, one of which refuses every write for 3 s; 4,000 rows/s.
//
//	go test -run '^$' -bench CatchUpAfterAFault -benchtime 3x ./internal/engine/sink/kafka
func BenchmarkCatchUpAfterAFault(b *testing.B) {
	var perDispatcher, perChangefeed time.Duration
	var starts [2]int
	for i := 0; i < b.N; i++ {
		d, n := catchUp(b, false)
		perDispatcher += d
		starts[0] += n
		d, n = catchUp(b, true)
		perChangefeed += d
		starts[1] += n
	}
	b.ReportMetric(perDispatcher.Seconds()/float64(b.N), "dispatcher-catchup-s")
	b.ReportMetric(perChangefeed.Seconds()/float64(b.N), "changefeed-catchup-s")
	b.ReportMetric(perChangefeed.Seconds()/perDispatcher.Seconds(), "changefeed/dispatcher")
	b.ReportMetric(float64(starts[0])/float64(b.N), "dispatcher-restarts")
	b.ReportMetric(float64(starts[1])/float64(b.N), "changefeed-restarts")
}

// catchUp runs one fault under one remedy; it returns how long the
// dispatchers took to catch up after the fault ended, and how many
// dispatchers were started again (all eight per changefeed restart).
func catchUp(b *testing.B, wholeChangefeed bool) (time.Duration, int) {
	c := faultyCluster(b, 8)
	uri := fmt.Sprintf("kafka://%s/cdc?partition=table&retry-timeout=500ms", c.Addrs())
	g := live(b, "gen://?tables=8&keys=100&rate=4000")
	open := func() *kafka.Sink {
		s, err := kafka.Open(context.Background(), uri, quiet())
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	type run struct {
		d    *dispatcher.Dispatcher
		done chan error
	}
	var mu sync.Mutex
	s := open()
	runs := make([]*run, 8)
	epochs := make([]uint64, 8)
	from := make([]model.Ts, 8)
	restarts := 0
	start := func(i int) {
		epochs[i]++
		d, err := dispatcher.New(dispatcher.Config{ID: fmt.Sprintf("t%d.%d", i, epochs[i]), Epoch: epochs[i], Span: model.Span{Table: fmt.Sprintf("t%04d", i+1)},
			Start: from[i], Source: g, Sink: s, Now: now, BatchSize: 64, Idle: 5 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		r := &run{d: d, done: make(chan error, 1)}
		go func() { r.done <- d.Run(context.Background()) }()
		runs[i] = r
	}
	for i := range 8 {
		from[i] = g.TableVersion(0)
		start(i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// The remedy: watch for failed dispatchers.
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			mu.Lock()
			for i, r := range runs {
				select {
				case <-r.done:
				default:
					continue
				}
				if !wholeChangefeed {
					from[i] = r.d.Checkpoint()
					start(i)
					restarts++
					continue
				}
				// Everything stops; the producer is opened anew.
				for j, o := range runs {
					if j == i {
						continue
					}
					_, _ = o.d.Stop(context.Background())
					<-o.done
				}
				for j, o := range runs {
					from[j] = o.d.Checkpoint()
				}
				s.Close()
				s = open()
				for j := range runs {
					start(j)
					restarts++
				}
				break
			}
			mu.Unlock()
		}
	}()
	time.Sleep(time.Second)
	c.Fail(kerr.NotEnoughReplicas.Code)
	time.Sleep(3 * time.Second)
	c.Heal()
	healed := model.TsFromTime(time.Now())
	began := time.Now()
	for {
		mu.Lock()
		behind := 0
		for _, r := range runs {
			if r.d.Checkpoint() < healed {
				behind++
			}
		}
		mu.Unlock()
		if behind == 0 {
			break
		}
		if time.Since(began) > time.Minute {
			b.Fatal("the dispatchers did not catch up within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(began)
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, r := range runs {
		_, _ = r.d.Stop(context.Background())
		<-r.done
	}
	mu.Unlock()
	s.Close()
	return took, restarts
}
