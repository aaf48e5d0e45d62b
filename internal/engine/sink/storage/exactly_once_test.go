package storage_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/sinktest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// storageCrash runs a partition under load into uri, crashes it with its
// persisted checkpoint behind what the bucket holds (the process dies:
// its sink is gone with it), resumes it through another sink on the same
// place, and verifies.
func storageCrash(t *testing.T, uri string) verify.Report {
	g := sinktest.Live(t, "gen://?tables=1&keys=100&rate=3000")
	span := model.Span{Table: "t0001"}
	a, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := sinktest.Resume(t, g, a, "p0", 1, span, g.TableVersion(0))
	time.Sleep(400 * time.Millisecond)
	persisted := first.D.Checkpoint()
	// Progress, not time: on a loaded machine 400 ms once held too few
	// flushes for the crash to cut.
	first.WaitPast(t, persisted+model.TsFromMillis(400))
	first.Crash()
	<-first.Done
	a.Close() // the crashed process's sink: what it had not written is gone
	b, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	heir, from := sinktest.Resume(t, g, b, "p0", 2, span, persisted)
	heir.WaitPast(t, first.D.Checkpoint()+model.TsFromMillis(400))
	upTo := heir.Stop(t)
	t.Logf("%s: resumed from %s (checkpoint %s)", uri, from, persisted)
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Expected < 1000 {
		t.Fatalf("%s: %+v", uri, rep)
	}
	return rep
}

// Issue 31: a storage sink's partition resumed after a crash writes none
// of the rows already in its data files (delivery=exactly-once), on a
// local directory (rows held in memory, or in their files' temporary
// files) and on S3; the same crash at least once (the default)
// writes the rows since the checkpoint again.
func TestExactlyOnceStorageACrashWritesNothingTwice(t *testing.T) {
	t.Parallel()
	s3 := buckettest.Start(t)
	for _, place := range []struct{ name, once, least string }{
		{"file", "file://" + t.TempDir() + "/once?flush-interval=100ms&delivery=exactly-once", "file://" + t.TempDir() + "/least?flush-interval=100ms"},
		{"s3", s3.URI("once", "flush-interval=100ms&delivery=exactly-once"), s3.URI("least", "flush-interval=100ms")},
		// Rows written into their files' temporary files at once: a crash
		// leaves those unplaced, and the heir writes them again.
		{"file, spool=bucket", "file://" + t.TempDir() + "/once?flush-interval=100ms&delivery=exactly-once&spool=bucket", "file://" + t.TempDir() + "/least?flush-interval=100ms&spool=bucket"},
	} {
		once, least := storageCrash(t, place.once), storageCrash(t, place.least)
		if !once.OK || once.Duplicates != 0 {
			t.Fatalf("%s exactly once: %+v", place.name, once)
		}
		if least.Duplicates == 0 {
			t.Fatalf("%s: at least once wrote nothing twice after the same crash (the scenario proves nothing): %+v", place.name, least)
		}
		t.Logf("%s after a crash: exactly once %d events, %d duplicates; at least once %d events, %d duplicates",
			place.name, once.Expected, once.Duplicates, least.Expected, least.Duplicates)
	}
}

// A crash after a flush's data file and before its index: the progress
// object's intent names the file, so the next owner finds it there,
// names it in its index for readers that follow indexes, and resumes
// after its rows.
func TestExactlyOnceStorageAFileWithoutItsIndexCounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	uri := "file://" + dir + "/cf?flush-interval=10m&max-flush-delay=0s&delivery=exactly-once"
	g := newGen(t, gen.Config{Tables: 1, Keys: 50, Rate: 1000})
	s, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, ok, err := s.Resume(ctx, sink.Writer{Dispatcher: "p0.1", Partition: "p0", Epoch: 1}); err != nil || ok {
		t.Fatalf("a new partition resumes from a recorded position (%v, %v)", ok, err)
	}
	r, err := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	for {
		evs := sourcetest.Read(t, r, model.TsFromMillis(start+2000), 25)
		if len(evs) == 0 {
			break
		}
		if err := s.Write(ctx, &sink.Batch{Dispatcher: "p0.1", Epoch: 1, Events: evs, End: sink.Position{Ts: r.Position()}, OnFlushed: func(error) {}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, "p0.1"); err != nil {
		t.Fatal(err)
	}
	// The index goes, as if the process died between the two writes.
	idx := dir + "/cf/gen/t0001/" + fmt.Sprint(uint64(g.TableVersion(0))) + "/meta/CDC_p0.1.index"
	if err := os.Remove(idx); err != nil {
		t.Fatal(err)
	}
	other, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	at, ok, err := other.Resume(ctx, sink.Writer{Dispatcher: "p0.2", Partition: "p0", Epoch: 2})
	if err != nil || !ok || at.Ts < model.TsFromMillis(start+1900) {
		t.Fatalf("resumed at %s (%v, %v); want the fed rows' end", at.Ts, ok, err)
	}
	body, err := os.ReadFile(idx)
	if err != nil || !strings.HasPrefix(string(body), "CDC_p0.1_") {
		t.Fatalf("the index was not written again: %q, %v", body, err)
	}
	// Another incarnation of the changefeed at the same place resumes
	// from its own checkpoint.
	again, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@2"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, ok, err := again.Resume(ctx, sink.Writer{Dispatcher: "p0.1", Partition: "p0", Epoch: 1}); err != nil || ok {
		t.Fatalf("a changefeed created again resumed after the earlier one's progress (%v, %v)", ok, err)
	}
}

// The same on the engine, on S3 (gofakes3): two changefeeds of one load,
// exactly once and at least once (enginetest.CompareDelivery). The
// capture holding partitions of both is killed (kill -9); then another
// is cut off from etcd and from the other captures past its session's
// TTL, and comes back once its partitions run elsewhere: a zombie, which
// its tenure checks stop before each upload (a bucket cannot fence it as
// Kafka fences a producer).
func TestExactlyOnceStorageThroughTheCrashOfACapture(t *testing.T) {
	t.Parallel()
	s3 := buckettest.Start(t)
	tc := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	once, least := enginetest.CompareDelivery(tc, s3.URI("once", "flush-interval=100ms&delivery=exactly-once"), s3.URI("least", "flush-interval=100ms"),
		func(victim model.NodeID) { tc.CrashThenIsolate(victim, "once") })
	t.Logf("kill -9 of a capture, then another frozen past its TTL and back, on S3: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}
