package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkKafkaSink sends the same rows through the Kafka sink and, as
// the baseline, through a bare sarama AsyncProducer (same settings: acks
// from all replicas, one request in flight, same encoded values) to the
// same in-process kfake broker. It reports messages/s and the ratio.
//
//	go test -run '^$' -bench KafkaSink -benchtime 3x ./internal/engine/sink/kafka
//
// CDCCTL_BENCH_SECONDS (3) is how many seconds of the generator's 20,000
// changes a second are handed over at once, and CDCCTL_BENCH_KEYS (5,000)
// the keys per table: together they set how often one key changes again
// while its previous change is in flight (the per-row gate's cost).
// CDCCTL_BENCH_CONNECTIONS sets the sink's connections-per-broker (its
// default unless set).
func BenchmarkKafkaSink(b *testing.B) {
	const start = int64(1_800_000_000_000)
	seconds, keys := benchEnv("CDCCTL_BENCH_SECONDS", 3), benchEnv("CDCCTL_BENCH_KEYS", 5000)
	g, _ := gen.New(gen.Config{Tables: 4, Keys: keys, Rate: 20000, Seed: 1, StartMillis: start})
	var evs []source.Event
	for _, tbl := range g.TableNames() {
		r, _ := g.Open(model.Span{Table: tbl}, model.TsFromMillis(start))
		evs = append(evs, sourcetest.Read(b, r, model.TsFromMillis(start+int64(seconds)*1000), 12_500*seconds/3)...)
	}
	var sinkTime, rawTime time.Duration
	for i := 0; i < b.N; i++ {
		// Each run on a fresh broker, after a GC, and in alternating
		// order: neither side inherits the other's topic or garbage.
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench", "raw"))
		if err != nil {
			b.Fatal(err)
		}
		addr := c.ListenAddrs()[0]
		sides := []func(){
			func() { sinkTime += benchSink(b, addr, evs) },
			func() { rawTime += benchRaw(b, addr, evs) },
		}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			runtime.GC()
			side()
		}
		c.Close()
	}
	sinkRate := float64(len(evs)*b.N) / sinkTime.Seconds()
	rawRate := float64(len(evs)*b.N) / rawTime.Seconds()
	b.ReportMetric(sinkRate, "sink-msgs/s")
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(sinkRate/rawRate, "sink/raw")
}

// benchSink sends evs through the sink as one dispatcher and waits for
// the flush ack.
func benchSink(b *testing.B, addr string, evs []source.Event) time.Duration {
	uri := fmt.Sprintf("kafka://%s/bench", addr)
	if n := benchEnv("CDCCTL_BENCH_CONNECTIONS", 0); n > 0 {
		uri += fmt.Sprintf("?connections-per-broker=%d", n)
	}
	s, err := kafka.Open(context.Background(), uri, quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	begin := time.Now()
	for off := 0; off < len(evs); off += 256 {
		if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Events: evs[off:min(off+256, len(evs))]}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(context.Background(), "d1"); err != nil {
		b.Fatal(err)
	}
	return time.Since(begin)
}

// benchRaw sends the same encoded rows through a bare AsyncProducer
// with the sink's delivery settings and waits for every ack.
func benchRaw(b *testing.B, addr string, evs []source.Event) time.Duration {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	p, err := sarama.NewAsyncProducer([]string{addr}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	begin := time.Now()
	acked := make(chan struct{})
	go func() {
		for n := 0; n < len(evs); n++ {
			select {
			case <-p.Successes():
			case perr := <-p.Errors():
				b.Error(perr)
			}
		}
		close(acked)
	}()
	var buf bytes.Buffer
	for j := range evs {
		buf.Reset()
		_ = codec.EncodeRow(&buf, codec.ProtocolCanalJSON, "gen", &evs[j])
		p.Input() <- &sarama.ProducerMessage{Topic: "raw", Key: sarama.StringEncoder(evs[j].Table + "/" + evs[j].Key), Value: sarama.ByteEncoder(append([]byte(nil), bytes.TrimRight(buf.Bytes(), "\n")...))}
	}
	<-acked
	return time.Since(begin)
}

// benchEnv is a positive integer from the environment, or def.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
