package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/sinktest"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func broker(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// live is a generator that started just now, so reading it is live load.
var live = sinktest.Live

// open opens the Kafka sink of uri, closed when the test ends.
func open(t testing.TB, uri string) *kafka.Sink {
	t.Helper()
	s, err := kafka.Open(context.Background(), uri, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func now() model.Ts { return model.TsFromTime(time.Now()) }

type run struct {
	d    *dispatcher.Dispatcher
	done chan error
}

func startDispatcher(t *testing.T, g *gen.Generator, s *kafka.Sink, id string, epoch uint64, span model.Span, from model.Ts) run {
	t.Helper()
	d, err := dispatcher.New(dispatcher.Config{ID: id, Epoch: epoch, Span: span, Start: from, Source: g, Sink: s, Now: now, BatchSize: 64, Idle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := run{d: d, done: make(chan error, 1)}
	go func() { r.done <- d.Run(context.Background()) }()
	return r
}

func stop(t *testing.T, r run) model.Ts {
	t.Helper()
	final, err := r.d.Stop(context.Background())
	if err != nil {
		t.Fatalf("stop %s: %v", r.d.ID(), err)
	}
	<-r.done
	return final
}

func TestKafkaSinkUnderLoadWithAHandOver(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?protocol=canal-json", strings.Join(c.ListenAddrs(), ","))
	s := open(t, uri)
	g := live(t, "gen://?tables=2&keys=150&rate=3000&ddl_every=400ms")
	// One partition per table: without the maintainer's table-wide
	// barrier (tested in internal/agent), each partition would write its
	// table's DDLs itself, and verify would count the repeats.
	var runs []run
	for _, table := range g.TableNames() {
		runs = append(runs, startDispatcher(t, g, s, table+"-p0.1", 1, model.Span{Table: table}, g.TableVersion(0)))
	}
	time.Sleep(600 * time.Millisecond)
	final := stop(t, runs[0])
	runs[0] = startDispatcher(t, g, s, "t0001-p0.2", 2, runs[0].d.Span(), final)
	time.Sleep(600 * time.Millisecond)
	var upTo model.Ts
	for i, r := range runs {
		f := stop(t, r)
		if i == 0 || f < upTo {
			upTo = f
		}
	}
	if err := s.WriteCheckpoint(context.Background(), upTo); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected < 1500 {
		t.Fatalf("kafka: %+v", rep)
	}
	// DDLs and the watermark reached every partition.
	ddls, watermarks := map[int32]int{}, map[int32]model.Ts{}
	err = kafka.Scan(context.Background(), mustParse(t, uri), func(p int32, kind codec.MessageKind, _ codec.Row, ts model.Ts) error {
		switch kind {
		case codec.MessageDDL:
			ddls[p]++
		case codec.MessageWatermark:
			watermarks[p] = ts
		}
		return nil
	})
	if err != nil || len(ddls) != 4 || len(watermarks) != 4 || watermarks[0] != upTo {
		t.Fatalf("ddls per partition %v, watermarks %v (%v)", ddls, watermarks, err)
	}
	t.Logf("verified %d events: %d lost, %d duplicates", rep.Expected, rep.Lost, rep.Duplicates)
}

func mustParse(t *testing.T, uri string) kafka.Config {
	cfg, err := kafka.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// seed 002 R1: a transient broker error reaches the dispatcher that sent
// the message, with its epoch; that dispatcher restarts from its
// checkpoint and nothing is lost.
func TestTransientErrorIsAttributedToItsDispatcher(t *testing.T) {
	t.Parallel()
	c, err := kafkatest.Start(1, "cdc", 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the sink's close
	uri := fmt.Sprintf("kafka://%s/cdc?retry-timeout=500ms", c.Addrs())
	s := open(t, uri)
	g := live(t, "gen://?tables=1&keys=100&rate=2000")
	span := model.Span{Table: "t0001"}
	r := startDispatcher(t, g, s, "p1.7", 7, span, g.TableVersion(0))
	time.Sleep(300 * time.Millisecond)
	c.Fail(kerr.NotEnoughReplicas.Code)
	var runErr error
	select {
	case runErr = <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the dispatcher did not see the broker's errors")
	}
	var de *kafka.DispatcherError
	if !errors.As(runErr, &de) || de.Dispatcher != "p1.7" || de.Epoch != 7 || !de.Transient || !kafka.IsTransient(de) {
		t.Fatalf("dispatcher failed with %v, want a transient DispatcherError of p1.7 epoch 7", runErr)
	}
	// The outage ends only after the failed dispatcher is gone (Run
	// returned once its messages had settled), as in a sustained outage.
	c.Heal()
	// The remedy: the same partition again from its checkpoint, new epoch.
	heir := startDispatcher(t, g, s, "p1.8", 8, span, r.d.Checkpoint())
	time.Sleep(300 * time.Millisecond)
	upTo := stop(t, heir)
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("after a transient error: %+v", rep)
	}
	t.Logf("verified %d events: %d lost, %d duplicates (replayed from the checkpoint)", rep.Expected, rep.Lost, rep.Duplicates)
}

func TestBadKafkaInput(t *testing.T) {
	for uri, mention := range map[string]string{
		"kafka://host/topic":                          "not host:port",
		"kafka://h:9092":                              "name one topic",
		"kafka://h:9092/t?protocol=avro":              "writes canal-json",
		"kafka://h:9092/t?partition=random":           "use key or table",
		"kafka://h:9092/t?bogus=1":                    "unknown parameter",
		"kafka://h:9092/t?partition-num=0":            "partition-num",
		"kafka://h:9092/t?recover-timeout=soon":       `recover-timeout="soon": not a duration; write it like 30s or 2m`,
		"kafka://h:9092/t?recover-timeout=10ms":       `recover-timeout="10ms": must be between 1s and 24h0m0s`,
		"kafka://h:9092/t?buffer-memory=1k":           `buffer-memory="1k": not a number of bytes; write it like 1048576`,
		"kafka://h:9092/t?buffer-memory=1024":         `buffer-memory="1024": must be between 64KiB and 16GiB`,
		"kafka://h:9092/t?retry-timeout=-1s":          `retry-timeout="-1s": must be between`,
		"kafka://h:9092/t?connections-per-broker=0":   `connections-per-broker="0": must be a number between 1 and 16`,
		"kafka://h:9092/t?connections-per-broker=two": `connections-per-broker="two": must be a number between 1 and 16`,
		"http://h:9092/t":                             "kafka://host:port/topic",
	} {
		if _, err := kafka.ParseURI(uri); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseURI(%q) = %v, want an error mentioning %q", uri, err, mention)
		}
	}
	if c, err := kafka.ParseURI("kafka://h:9092/t?recover-timeout=90s"); err != nil || c.RecoverTimeout != 90*time.Second {
		t.Errorf("recover-timeout=90s: %+v, %v", c.RecoverTimeout, err)
	}
	begin := time.Now()
	_, err := kafka.Open(context.Background(), "kafka://127.0.0.1:1/t?dial-timeout=500ms", quiet())
	if err == nil || !strings.Contains(err.Error(), "cannot reach Kafka at [127.0.0.1:1]") {
		t.Fatalf("unreachable broker: %v", err)
	}
	if time.Since(begin) > 20*time.Second {
		t.Fatalf("took %s to give up on an unreachable broker", time.Since(begin))
	}
	if !errors.Is(err, model.ErrUnreachable) {
		t.Fatalf("a broker refusing connections is not marked worth a retry: %v", err)
	}
	// A listener that closes every connection at once, as one that wants
	// TLS or a login does to a client offering neither: a setting to fix,
	// not worth the same request again, and the hint says which.
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = kafka.Open(context.Background(), "kafka://"+ln.Addr().String()+"/t?dial-timeout=500ms", quiet())
	if err == nil || errors.Is(err, model.ErrUnreachable) || !strings.Contains(err.Error(), "may want TLS (enable-tls=true)") {
		t.Fatalf("a broker closing the connection: %v (marked worth a retry: %v)", err, errors.Is(err, model.ErrUnreachable))
	}
}
