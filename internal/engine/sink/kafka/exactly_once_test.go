package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/sinktest"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// crashAndResume runs a partition under load on one node, crashes it
// with its persisted checkpoint well behind what the sink holds (the
// checkpoint is persisted every few hundred milliseconds; a crash loses
// what came since), resumes it on another node, and verifies the topic.
func crashAndResume(t *testing.T, query string, meanwhile ...func(c *kfake.Cluster)) verify.Report {
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?%s", strings.Join(c.ListenAddrs(), ","), query)
	g := sinktest.Live(t, "gen://?tables=1&keys=100&rate=3000")
	span := model.Span{Table: "t0001"}
	a := open(t, uri)
	for _, f := range meanwhile {
		f(c)
	}
	first, _ := sinktest.Resume(t, g, a, "p0", 1, span, g.TableVersion(0))
	time.Sleep(300 * time.Millisecond)
	persisted := first.D.Checkpoint()
	// Progress, not time: in CI 300 ms once held no commit after the
	// persisted checkpoint, and the crash had nothing to cut.
	first.WaitPast(t, persisted+model.TsFromMillis(300))
	// kill -9: the dispatcher stops where it is; its node's sink is left
	// as it was, with whatever transaction it had open.
	first.Crash()
	<-first.Done
	b := open(t, uri)
	heir, from := sinktest.Resume(t, g, b, "p0", 2, span, persisted)
	heir.WaitPast(t, first.D.Checkpoint()+model.TsFromMillis(300))
	upTo := heir.Stop(t)
	t.Logf("%s: resumed from %s (checkpoint %s)", query, from, persisted)
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK && (rep.Lost != 0 || rep.OutOfOrder != 0) || rep.Expected < 1000 {
		t.Fatalf("%s: %+v", query, rep)
	}
	return rep
}

// Issue 31: a partition's new owner resumes after what the old one
// committed, not from its checkpoint: a crash writes nothing twice. The
// same crash at least once (the default) writes what came after the
// checkpoint again; both are measured in the same run.
func TestExactlyOnceACrashWritesNothingTwice(t *testing.T) {
	t.Parallel()
	once := crashAndResume(t, "delivery=exactly-once")
	if once.Duplicates != 0 || !once.OK {
		t.Fatalf("exactly once: %+v", once)
	}
	least := crashAndResume(t, "delivery=at-least-once")
	if least.Duplicates == 0 {
		t.Fatalf("at least once wrote nothing twice after the same crash (the scenario proves nothing): %+v", least)
	}
	t.Logf("after a crash: exactly once %d events, %d duplicates; at least once %d events, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}

// Another writer of the progress topic's partition (another partition of
// the changefeed, or of another changefeed) whose transaction stays open
// holds the partition's last stable offset back: a read_committed reader
// sees nothing after it. The new owner must still find every progress
// record its predecessor committed after that offset, or it resumes from
// the checkpoint and writes what was committed twice.
func TestExactlyOnceACrashBehindAnotherOpenTransactionWritesNothingTwice(t *testing.T) {
	t.Parallel()
	hold := func(c *kfake.Cluster) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("cdcctl/other/p9"),
			kgo.TransactionTimeout(2*time.Minute), kgo.DefaultProduceTopic("cdc-progress"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		ctx := context.Background()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		// Left open: a crashed writer's transaction, until its timeout.
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("cdcctl/other/p9"), Value: []byte(`{"ts":1}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rep := crashAndResume(t, "delivery=exactly-once&progress-partitions=1", hold)
	if rep.Duplicates != 0 || !rep.OK {
		t.Fatalf("exactly once behind another open transaction: %+v", rep)
	}
}

// A zombie (a node that froze, and whose partition was started
// elsewhere) cannot commit anything after the new owner started: Kafka
// fences its producer, its dispatcher fails, and what it had open is
// never seen by a read_committed reader.
func TestExactlyOnceAZombieCannotCommit(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?delivery=exactly-once", strings.Join(c.ListenAddrs(), ","))
	g := sinktest.Live(t, "gen://?tables=1&keys=100&rate=3000")
	span := model.Span{Table: "t0001"}
	a := open(t, uri)
	zombie, _ := sinktest.Resume(t, g, a, "p0", 1, span, g.TableVersion(0))
	time.Sleep(300 * time.Millisecond)
	b := open(t, uri)
	heir, from := sinktest.Resume(t, g, b, "p0", 2, span, g.TableVersion(0))
	if from <= g.TableVersion(0) {
		t.Fatalf("the new owner resumes from %s: it did not read what the first one committed", from)
	}
	var zerr error
	select {
	case zerr = <-zombie.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced owner kept running")
	}
	var de *kafka.DispatcherError
	if !errors.As(zerr, &de) || de.Dispatcher != "p0.1" {
		t.Fatalf("the fenced owner ended with %v, want its DispatcherError", zerr)
	}
	time.Sleep(300 * time.Millisecond)
	upTo := heir.Stop(t)
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected < 1000 {
		t.Fatalf("after a zombie: %+v", rep)
	}
	t.Logf("the zombie failed with: %v; verified %d events, 0 lost, 0 duplicates", zerr, rep.Expected)
}

func TestExactlyOnceParameters(t *testing.T) {
	for uri, mention := range map[string]string{
		"kafka://h:9092/t?delivery=twice":            "use at-least-once (the default) or exactly-once",
		"kafka://h:9092/t?progress-partitions=0":     "must be between 1 and 1000",
		"kafka://h:9092/t?transaction-timeout=100ms": "must be between 1s and 1h0m0s",
		"kafka://h:9092/t?progress-topic=a%20b":      "name one topic",
		"kafka://h:9092/t?transaction-meta=yes":      "use true or false (the default)",
		"kafka://h:9092/t?transaction-topic=a%20b":   "must be a topic name",
	} {
		if _, err := kafka.ParseURI(uri); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseURI(%q) = %v, want an error mentioning %q", uri, err, mention)
		}
	}
	cfg, err := kafka.ParseURI("kafka://h:9092/t?delivery=exactly-once")
	if err != nil || !cfg.ExactlyOnce() || cfg.ProgressPartitions != 16 || cfg.TransactionTimeout != time.Minute {
		t.Fatalf("delivery=exactly-once: %+v, %v", cfg, err)
	}
}

// A broker refusing produce requests (NOT_ENOUGH_REPLICAS) for a moment
// within retry-timeout: the transaction's batches are sent again with
// their sequence numbers and the dispatcher runs on; past retry-timeout,
// its transaction is aborted and it fails (seed 002: only it), and its
// successor resumes after the last committed transaction. Either way
// the topic holds every row once.
func TestExactlyOnceThroughABrokerFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault time.Duration
		fails bool
	}{{"within retry-timeout", 300 * time.Millisecond, false}, {"past retry-timeout", 2 * time.Second, true}} {
		c, err := kafkatest.Start(1, "cdc", 4)
		if err != nil {
			t.Fatal(err)
		}
		uri := fmt.Sprintf("kafka://%s/cdc?delivery=exactly-once&retry-timeout=1s", c.Addrs())
		s := open(t, uri)
		g := sinktest.Live(t, "gen://?tables=1&keys=100&rate=2000")
		span := model.Span{Table: "t0001"}
		first, _ := sinktest.Resume(t, g, s, "p0", 1, span, g.TableVersion(0))
		time.Sleep(300 * time.Millisecond)
		c.Fail(kerr.NotEnoughReplicas.Code)
		time.Sleep(tc.fault)
		c.Heal()
		last := first
		select {
		case err := <-first.Done:
			var de *kafka.DispatcherError
			if !tc.fails || !errors.As(err, &de) || !de.Transient {
				t.Fatalf("%s: the dispatcher ended with %v", tc.name, err)
			}
			heir, _ := sinktest.Resume(t, g, s, "p0", 2, span, first.D.Checkpoint())
			last = heir
		case <-time.After(time.Second):
			if tc.fails {
				t.Fatalf("%s: the dispatcher ran on", tc.name)
			}
		}
		time.Sleep(300 * time.Millisecond)
		upTo := last.Stop(t)
		rep, err := verify.Kafka(context.Background(), g, uri, upTo)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.Duplicates != 0 || rep.Expected < 1000 {
			t.Fatalf("%s: %+v", tc.name, rep)
		}
		t.Logf("a broker fault %s: %d events, 0 lost, 0 duplicates", tc.name, rep.Expected)
		s.Close()
		c.Close()
	}
}

// An upstream transaction larger than buffer-memory, exactly once: its
// batches' bytes are given back only when a batch of it ends the Kafka
// transaction, and the next batch of it waited for room that only that
// commit could make, for good (with every other writer of the sink).
// Now the transaction's own batches go over the buffer, it commits
// whole, and a read_committed reader sees every row once.
func TestExactlyOnceATransactionLargerThanTheBufferCommits(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?delivery=exactly-once&buffer-memory=65536", strings.Join(c.ListenAddrs(), ","))
	g := sinktest.Live(t, "gen://?tables=1&keys=2000&rate=20000")
	s := open(t, uri)
	ctx := context.Background()
	if _, _, err := s.Resume(ctx, sink.Writer{Dispatcher: "p0.1", Partition: "p0", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := g.Open(model.Span{Table: "t0001"}, g.TableVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	upTo := g.TableVersion(0) + model.TsFromMillis(200)
	evs := sourcetest.Read(t, r, upTo, 1_000_000)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for off := 0; off < len(evs); off += 256 {
		batch := evs[off:min(off+256, len(evs))]
		last := off+256 >= len(evs)
		// One upstream transaction: every batch but the last inside it.
		b := &sink.Batch{Dispatcher: "p0.1", Epoch: 1, Events: batch, Inside: !last, End: sink.Position{Ts: batch[len(batch)-1].CommitTs}}
		if err := s.Write(wctx, b); err != nil {
			t.Fatalf("batch at %d of %d rows (%d KiB of buffer): %v", off, len(evs), 64, err)
		}
	}
	if err := s.Flush(wctx, "p0.1"); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Kafka(ctx, g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected != uint64(len(evs)) || len(evs) < 2000 {
		t.Fatalf("%d rows written in one transaction: %+v", len(evs), rep)
	}
}
