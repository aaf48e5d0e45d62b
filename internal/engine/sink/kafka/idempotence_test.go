package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A produce request the client gave up on (its read timed out, the
// connection was closed) can still be appended by the broker, which read
// it before: after its retry and after the batches behind it. Without a
// producer id and sequence numbers the broker cannot tell it is a copy,
// and the partition then holds a row's older change after its newer one.
// The sink numbers its batches (an idempotent producer), so the broker
// drops the late copy.
func TestABatchTheBrokerTakesAfterTheClientGaveUpOnItLandsOnce(t *testing.T) {
	t.Parallel()
	evs := someEvents(t)[:3] // rows told apart by their messages

	b := lateBroker(t)
	// One partition for every row: the order the test reads is the
	// topic's.
	uri := fmt.Sprintf("kafka://%s/cdc?hash-partitions=1&dial-timeout=200ms", b.ListenAddrs()[0])
	s := open(t, uri)
	write := func(e source.Event) {
		t.Helper()
		if err := writeRows(t, s, "d", e); err != nil {
			t.Fatal(err)
		}
	}
	write(evs[0]) // acked by its second attempt, the first still held
	<-b.held
	write(evs[1])
	b.appendLate()
	write(evs[2])

	got := messages(t, uri) // one partition
	// Each row's message told apart by its text: the first seen is the
	// first row written (each was acked before the next was written).
	seen := map[string]int{}
	var order []int
	for _, v := range got {
		if _, ok := seen[v]; !ok {
			seen[v] = len(seen)
		}
		order = append(order, seen[v])
	}
	if want := []int{0, 1, 2}; !slices.Equal(order, want) {
		t.Fatalf("partition 0 holds the rows %v (by the order they were written); want each once, in that order: %v", order, want)
	}
}

// A batch the sink gave up on (retry-timeout) after an attempt the broker
// had read but not answered may still be appended later. The next batch
// of its partition must not be taken for a copy of it: it goes in a new
// epoch, not with the numbers the given-up batch had. (With them, the
// broker would drop a next batch of the same length as a duplicate,
// and answer that it has it: lost.)
func TestABatchGivenUpOnThatLandsLateDoesNotSwallowTheNext(t *testing.T) {
	t.Parallel()
	evs := someEvents(t)[:2] // rows told apart by their messages

	b := lateBroker(t)
	b.refusing.Store(true) // the retries: refused, nothing appended
	uri := fmt.Sprintf("kafka://%s/cdc?hash-partitions=1&dial-timeout=200ms&retry-timeout=1s", b.ListenAddrs()[0])
	s := open(t, uri)
	if err := writeRows(t, s, "given-up", evs[0]); err == nil {
		t.Fatal("the first row was acked; want it given up on after retry-timeout")
	}
	<-b.held
	b.refusing.Store(false)
	b.appendLate()
	if err := writeRows(t, s, "next", evs[1]); err != nil {
		t.Fatal(err)
	}

	got := messages(t, uri)
	if len(got) != 2 || got[0] == got[1] {
		t.Fatalf("the topic holds %d messages (%d distinct); want the late one and the next, which was acked", len(got), len(slices.Compact(slices.Sorted(slices.Values(got)))))
	}
}

// A cluster that gives this client no producer id (Kafka before 2.8
// without IDEMPOTENT_WRITE granted) still takes its rows: the sink sends
// them unnumbered, as before numbering, and says what that risks and the
// fix.
func TestASinkWithoutAProducerIDSaysSoAndWrites(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := kreq.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	var out kafka.SyncBuffer
	uri := fmt.Sprintf("kafka://%s/cdc", c.ListenAddrs()[0])
	s, err := kafka.Open(context.Background(), uri, slog.New(slog.NewTextHandler(&out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if log := out.String(); !strings.Contains(log, "no producer id") || !strings.Contains(log, "IDEMPOTENT_WRITE") {
		t.Fatalf("the log says %q; want the missing producer id and the grant that fixes it", log)
	}
	evs := someEvents(t)
	if err := writeRows(t, s, "d", evs...); err != nil {
		t.Fatal(err)
	}
	if n := countMessages(t, uri); n != len(evs) {
		t.Fatalf("%d messages in the topic; want %d", n, len(evs))
	}
}

// A batch whose numbers the broker refuses (its producer state is not
// the sink's: lost, or moved to another epoch) appended nothing, and
// sent again with them it would be refused again: it is stamped again,
// in a new epoch, and lands once.
func TestABatchWhoseNumbersTheBrokerRefusesIsStampedAgain(t *testing.T) {
	t.Parallel()
	for name, code := range map[string]int16{"out-of-order": kerr.OutOfOrderSequenceNumber.Code, "old-epoch": kerr.InvalidProducerEpoch.Code, "unknown-producer": kerr.UnknownProducerID.Code} {
		t.Run(name, func(t *testing.T) {
			c := broker(t, "cdc")
			var refused atomic.Int32
			first := int32(-1)
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				// Every batch in the epoch of the first is refused.
				var b kmsg.RecordBatch
				if err := b.ReadFrom(kreq.(*kmsg.ProduceRequest).Topics[0].Partitions[0].Records); err != nil {
					t.Error(err)
				}
				if first < 0 {
					first = int32(b.ProducerEpoch)
				}
				if int32(b.ProducerEpoch) == first {
					refused.Add(1)
					return kafkatest.Refusal(kreq, code), nil, true
				}
				return nil, nil, false
			})
			uri := fmt.Sprintf("kafka://%s/cdc", c.ListenAddrs()[0])
			s := open(t, uri)
			evs := someEvents(t)
			if err := writeRows(t, s, "d", evs...); err != nil {
				t.Fatal(err)
			}
			if refused.Load() == 0 {
				t.Fatal("no batch was refused; the test proves nothing")
			}
			if n := countMessages(t, uri); n != len(evs) {
				t.Fatalf("%d messages in the topic; want %d, each once", n, len(evs))
			}
		})
	}
}

// messages are the messages of the topic of a sink URI, a partition's
// in their order.
func messages(t *testing.T, uri string) []string {
	t.Helper()
	cfg, err := kafka.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.ScanMessages(ctx, cfg, func(_ int32, _ int64, v []byte) error {
		got = append(got, string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// A sink opened after another of its changefeed closed (the changefeed
// restarted on its capture) goes on under the closed sink's producer id,
// in the next epoch: a batch the closed sink gave up on, whose attempt
// the broker appends late, is refused once the new sink has written to
// the partition, instead of landing after the rows the new one wrote
// again and after them. (Under a new id nothing refuses it: the topic
// ends on the older row.)
func TestASinkOpenedAgainGoesOnUnderTheIDOfTheOneBefore(t *testing.T) {
	t.Parallel()
	evs := someEvents(t)[:2]
	b := lateBroker(t)
	b.refusing.Store(true)
	uri := fmt.Sprintf("kafka://%s/cdc?hash-partitions=1&dial-timeout=200ms&retry-timeout=1s", b.ListenAddrs()[0])
	producers := kafka.NewProducers()
	openOne := func() *kafka.Sink {
		s, err := kafka.OpenWith(context.Background(), uri, quiet(), kafka.Env{Changefeed: "cf", Producers: producers})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := openOne()
	if err := writeRows(t, first, "d", evs[0]); err == nil {
		t.Fatal("the first row was acked; want it given up on after retry-timeout")
	}
	<-b.held
	first.Close()
	b.refusing.Store(false)
	// The changefeed restarted: a new sink writes the row again, and the
	// next.
	second := openOne()
	t.Cleanup(func() { second.Close() })
	if err := writeRows(t, second, "d", evs[0]); err != nil {
		t.Fatal(err)
	}
	if err := writeRows(t, second, "d", evs[1]); err != nil {
		t.Fatal(err)
	}
	b.appendLate()
	got := messages(t, uri)
	if len(got) != 2 || got[1] == got[0] {
		t.Fatalf("the topic holds %d messages; want the two rows the second sink wrote, the first sink's late attempt refused", len(got))
	}
}

// late is a one-broker cluster that sits on the first produce request
// past the client's read timeout (3 × dial-timeout: the client closes
// the connection and sends the batch again) until appendLate, and then
// appends it; while refusing, it refuses every other produce request,
// appending nothing.
type late struct {
	*kfake.Cluster
	held, release chan struct{}
	released      sync.Once
	woke          atomic.Bool
	refusing      atomic.Bool
}

func lateBroker(t *testing.T) *late {
	b := &late{Cluster: broker(t, "cdc"), held: make(chan struct{}), release: make(chan struct{})}
	var sat atomic.Bool
	b.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if sat.CompareAndSwap(false, true) {
			close(b.held)
			b.SleepControl(func() { <-b.release })
			b.woke.Store(true)
			return nil, nil, false // appended now, late
		}
		if b.refusing.Load() {
			return kafkatest.Refusal(kreq, kerr.NotEnoughReplicas.Code), nil, true
		}
		return nil, nil, false
	})
	// Before the cluster's close (cleanups run last first): a failure
	// must not leave it sitting on the request.
	t.Cleanup(func() { b.released.Do(func() { close(b.release) }) })
	return b
}

// appendLate lets the broker append the request it sat on, and waits for
// it to have had its turn.
func (b *late) appendLate() {
	b.released.Do(func() { close(b.release) })
	for !b.woke.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}

// writeRows writes rows as one batch of dispatcher d and returns its
// flush's outcome.
func writeRows(t *testing.T, s *kafka.Sink, d string, evs ...source.Event) error {
	t.Helper()
	acked := make(chan error, 1)
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: d, Epoch: 1, Events: evs, OnFlushed: func(err error) { acked <- err }}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acked:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("a row was not settled in 30 s")
	}
	return nil
}
