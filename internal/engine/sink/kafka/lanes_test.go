package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A broker's partitions are spread over connections-per-broker
// connections, one request on each at a time: while the broker sits on
// one partition's batch, the partitions of its other connections go on
// (their encoding and the broker's work overlap). With one connection
// everything waits behind it. Every message lands either way.
func TestABrokerSittingOnOneBatchHoldsUpOnlyItsConnection(t *testing.T) {
	t.Parallel()
	const start = int64(1_800_000_000_000)
	g, err := gen.New(gen.Config{Tables: 4, Keys: 50, Rate: 400, Seed: 3, StartMillis: start})
	if err != nil {
		t.Fatal(err)
	}
	var evs []source.Event
	for _, tbl := range g.TableNames() {
		r, err := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, sourcetest.Read(t, r, model.TsFromMillis(start+1000), 40)...)
	}
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("connections-per-broker=%d", conns), func(t *testing.T) {
			c := broker(t, "cdc") // one broker leading 4 partitions
			var sat atomic.Bool
			held, release := make(chan struct{}), make(chan struct{})
			var released sync.Once
			letGo := func() { released.Do(func() { close(release) }) }
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				if sat.CompareAndSwap(false, true) {
					close(held)
					c.SleepControl(func() { <-release })
				}
				return nil, nil, false // then handled as usual
			})
			uri := fmt.Sprintf("kafka://%s/cdc?connections-per-broker=%d", c.ListenAddrs()[0], conns)
			s := open(t, uri)
			// Before the sink's Close (cleanups run last first): a
			// failure must not leave the broker sitting on a request
			// Close waits for.
			t.Cleanup(letGo)
			acks := make(chan error, len(evs))
			write := func(d string, evs []source.Event) {
				if err := s.Write(context.Background(), &sink.Batch{Dispatcher: d, Epoch: 1, Events: evs, OnFlushed: func(err error) { acks <- err }}); err != nil {
					t.Fatal(err)
				}
			}
			write("first", evs[:1])
			<-held
			for i := 1; i < len(evs); i++ {
				write("rest", evs[i:i+1])
			}
			acked := 0
			// wait counts acks until n have come or d has passed.
			wait := func(n int, d time.Duration) {
				timer := time.After(d)
				for acked < n {
					select {
					case err := <-acks:
						if err != nil {
							t.Fatal(err)
						}
						acked++
					case <-timer:
						return
					}
				}
			}
			// The broker sits on the request until release (or until the
			// connection's read timeout, 15 s, gives up on it).
			if conns == 1 {
				wait(1, 500*time.Millisecond)
				if acked != 0 {
					t.Fatalf("%d messages acked while the broker sat on the one connection's request; want 0", acked)
				}
			} else {
				// Those of the other three partitions: about 3/4.
				wait(len(evs)/2, 10*time.Second)
				if acked < len(evs)/2 {
					t.Fatalf("%d of %d messages acked while the broker sat on one partition's batch; want those of the other connections", acked, len(evs))
				}
				wait(len(evs), 300*time.Millisecond)
				if acked == len(evs) {
					t.Fatalf("all %d messages acked while the broker sat on one of them", acked)
				}
			}
			letGo()
			wait(len(evs), 30*time.Second)
			if acked != len(evs) {
				t.Fatalf("%d of %d messages acked after the broker answered", acked, len(evs))
			}
			if landed := countMessages(t, uri); landed != len(evs) {
				t.Fatalf("%d messages in the topic; want %d", landed, len(evs))
			}
		})
	}
}

// countMessages counts the messages in the topic of a sink URI.
func countMessages(t *testing.T, uri string) int {
	t.Helper()
	cfg, err := kafka.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.ScanMessages(ctx, cfg, func(int32, int64, []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
