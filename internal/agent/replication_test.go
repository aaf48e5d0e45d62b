package agent

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// demoSource is the load of the engine tests: 8 tables of 200 keys,
// 1,500 changes a second, a DDL every second. (The load a capture keeps
// up with is measured by benchmarks; here it only has to keep every
// partition busy through the operation.)
const demoSource = "gen://?tables=8&keys=200&rate=1500&ddl_every=1s"

// runDemo creates changefeed "demo" (4 partitions per table) and waits
// until its checkpoint has moved warm past its start.
func (tc *testCluster) runDemo(c *api.Client, sourceURI, sinkURI string, warm time.Duration) (*api.ChangefeedResponse, model.Ts) {
	tc.t.Helper()
	created, err := c.CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: "demo", Source: sourceURI, Sink: sinkURI, PartitionsPerTable: 4})
	if err != nil {
		tc.t.Fatal(err)
	}
	return created, tc.waitCheckpoint(c, "demo", model.Ts(created.StartTs)+model.TsFromMillis(warm.Milliseconds()))
}

// waitCheckpoint waits until a changefeed's checkpoint passes ts.
func (tc *testCluster) waitCheckpoint(c *api.Client, cf string, ts model.Ts) model.Ts {
	tc.t.Helper()
	var cp model.Ts
	// 60 s: for a machine running this package beside the others (a
	// 600-partition changefeed took longer than 30 s there); the pace
	// itself is measured by benchmarks, not here.
	tc.eventually("checkpoint of "+cf+" passes "+ts.String(), 60*time.Second, func() bool {
		got, err := c.Changefeed(context.Background(), cf)
		if err != nil {
			return false
		}
		cp = model.Ts(got.CheckpointTs)
		return cp > ts
	})
	return cp
}

// A changefeed over 8 tables × 4 partitions replicates into the storage
// sink across three captures; one capture stops gracefully mid-stream and
// its partitions continue elsewhere from exactly where they stopped; the
// sink then holds every event once, in per-key order.
func TestChangefeedSurvivesAGracefulNodeStopWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	replicateThroughANodeStop(t, false, demoSource, "file://"+t.TempDir()+"?flush-interval=100ms", verifyStorage)
}

// The same through the Kafka sink, on a real-protocol broker in process,
// with the nodes talking gRPC over loopback as separate processes do.
func TestChangefeedIntoKafkaSurvivesAGracefulNodeStop(t *testing.T) {
	t.Parallel()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the cluster's cleanups, so it closes after them.
	t.Cleanup(broker.Close)
	// With DDLs: the table-wide barrier puts each DDL once into every
	// Kafka partition, between the rows before and after it.
	replicateThroughANodeStop(t, true, demoSource, "kafka://"+broker.ListenAddrs()[0]+"/demo?protocol=canal-json", func(ctx context.Context, g *gen.Generator, sinkURI string, upTo model.Ts) (verify.Report, error) {
		return verify.Kafka(ctx, g, sinkURI, upTo)
	})
}

type verifier func(ctx context.Context, g *gen.Generator, sinkURI string, upTo model.Ts) (verify.Report, error)

func replicateThroughANodeStop(t *testing.T, viaGRPC bool, sourceURI, sinkURI string, check verifier) {
	tc := newTestCluster(t)
	if viaGRPC {
		tc.hub = nil
	}
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	created, cp := tc.runDemo(c, sourceURI, sinkURI, 1500*time.Millisecond)
	if created.Partitions != 32 || created.State != "normal" {
		t.Fatalf("created %+v", created)
	}

	// Every partition placed, on all three captures.
	parts, err := c.Partitions(ctx, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, p := range parts.Partitions {
		perNode[p.Node]++
	}
	if len(parts.Partitions) != 32 || len(perNode) != 3 || perNode[""] != 0 {
		t.Fatalf("placement: %v", perNode)
	}
	// The data path's metrics: every node writes, so every node counts.
	scheme, _, _ := strings.Cut(sinkURI, ":")
	for id, rn := range tc.nodes {
		tc.eventually(string(id)+" counts durable events and flush times", 10*time.Second, func() bool {
			body := tc.get(rn.addr, "/metrics")
			return metricValue(body, `cdcctl_sink_events_total{changefeed="demo",sink="`+scheme+`"}`) > 0 &&
				metricValue(body, `cdcctl_sink_row_bytes_total{changefeed="demo",sink="`+scheme+`"}`) > 0 &&
				metricValue(body, `cdcctl_sink_flush_duration_seconds_count{sink="`+scheme+`"}`) > 0
		})
	}
	// Operators see replication on /metrics: the checkpoint as Unix
	// milliseconds (a float64 holds it exactly; a TSO, ms << 18, would be
	// 2^18 times that), its lag, and the dispatchers running.
	body := tc.get(tc.nodes[leader.Node].addr, "/metrics")
	for _, want := range []string{`cdcctl_changefeed_checkpoint_lag_seconds{changefeed="demo"}`, `cdcctl_dispatcher_running{changefeed="demo"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Between the changefeed's start and now, whatever the lag on a
	// loaded machine.
	startMs, nowMs := float64(model.Ts(created.StartTs).Time().UnixMilli()), float64(time.Now().UnixMilli())
	if ms := metricValue(body, `cdcctl_changefeed_checkpoint_ts{changefeed="demo"}`); ms < startMs || ms > nowMs {
		t.Errorf("cdcctl_changefeed_checkpoint_ts is %.0f; want the checkpoint in Unix ms, between the start %.0f and now %.0f", ms, startMs, nowMs)
	}
	if scheme == "kafka" {
		// The producer's series name the broker (kfake's one is 0); the
		// sink's own test proves what it reports through a broker fault.
		for id, rn := range tc.nodes {
			body := tc.get(rn.addr, "/metrics")
			if metricValue(body, `cdcctl_kafka_produce_requests_total{broker="0",result="ok"}`) <= 0 || metricValue(body, `cdcctl_kafka_produce_bytes_total{broker="0"}`) <= 0 {
				t.Errorf("%s: no produce requests or bytes counted for broker 0", id)
			}
		}
	}
	if scheme == "file" {
		// Seed 004's storage series: data writes timed, and the
		// active-tables gauge exported by every capture (it may read 0
		// between flushes).
		for id, rn := range tc.nodes {
			body := tc.get(rn.addr, "/metrics")
			if metricValue(body, "cdcctl_storage_data_write_duration_seconds_count") <= 0 || metricValue(body, "cdcctl_storage_active_tables") < 0 {
				t.Errorf("%s: no storage data writes timed, or no cdcctl_storage_active_tables", id)
			}
		}
	}
	if scheme == "file" && strings.Contains(sourceURI, "ddl_every") {
		// The DDL barrier's flushes are counted as such, not as forced.
		tc.eventually("flushes for DDLs counted", 10*time.Second, func() bool {
			ddl := 0.0
			for _, rn := range tc.nodes {
				ddl += metricValue(tc.get(rn.addr, "/metrics"), `cdcctl_storage_flush_tasks_total{reason="ddl"}`)
			}
			return ddl > 0
		})
	}

	// Stop the capture that runs the maintainer, under load: the
	// maintainer moves, its dispatchers' partitions move, nothing stops.
	cur, err := c.Changefeed(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	victim := model.NodeID(cur.Maintainer)
	if victim == "" {
		victim = tc.followerOf(leader.Node)
	}
	if err := tc.stop(victim); err != nil {
		t.Fatal(err)
	}
	c = tc.client()
	tc.eventually("the stopped capture's partitions run elsewhere", 20*time.Second, func() bool {
		ps, err := c.Partitions(ctx, "demo", string(victim))
		return err == nil && len(ps.Partitions) == 0
	})
	cp = tc.waitCheckpoint(c, "demo", cp+model.TsFromMillis(1500))
	if moved, err := c.Changefeed(ctx, "demo"); err != nil || moved.Maintainer == string(victim) || moved.MaintainerEpoch <= cur.MaintainerEpoch {
		t.Fatalf("maintainer after stopping %s: %+v %v", victim, moved, err)
	}

	// Pause and resume: every dispatcher stops gracefully and resumes
	// exactly where it stopped.
	if _, err := c.PauseChangefeed(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := c.ResumeChangefeed(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	cp = tc.waitCheckpoint(c, "demo", cp+model.TsFromMillis(1000))
	// Pause again: the checkpoint is exact, and verify reads up to it.
	rep := tc.pauseAndVerify(c, "demo", sinkURI, check)
	if !rep.OK || rep.Duplicates != 0 || rep.Expected < 5000 {
		t.Fatalf("verify: %+v", rep)
	}
	t.Logf("verified %d events over %d keys up to the checkpoint: %d lost, %d duplicates, %d out of order, %d misplaced DDL",
		rep.Expected, rep.Keys, rep.Lost, rep.Duplicates, rep.OutOfOrder, rep.Misplaced)
}

// pause pauses a changefeed. A write that got no answer in time (a
// loaded machine) may or may not have landed: as the client's error
// says, it reads before it tries again, for up to a minute.
func (tc *testCluster) pause(c *api.Client, cf string) {
	tc.t.Helper()
	ctx := context.Background()
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, err = c.PauseChangefeed(ctx, cf); err == nil || api.AsError(err).Code != api.CodeInternal && api.AsError(err).Status() < 500 {
			break
		}
		if got, rerr := c.Changefeed(ctx, cf); rerr == nil && got.State == "paused" {
			return
		}
	}
	if err != nil {
		tc.t.Fatalf("pause %s: %v", cf, err)
	}
}

// pauseAndVerify pauses a changefeed (every dispatcher stops gracefully,
// the checkpoint is exact) and checks its sink up to the checkpoint.
func (tc *testCluster) pauseAndVerify(c *api.Client, cf, sinkURI string, check verifier) verify.Report {
	tc.t.Helper()
	tc.pause(c, cf)
	time.Sleep(2 * time.Second)
	return tc.verifyPaused(c, cf, sinkURI, check)
}

// verifyPaused verifies a paused changefeed's sink up to its checkpoint.
func (tc *testCluster) verifyPaused(c *api.Client, cf, sinkURI string, check verifier) verify.Report {
	tc.t.Helper()
	ctx := context.Background()
	final, err := c.Changefeed(ctx, cf)
	if err != nil {
		tc.t.Fatal(err)
	}
	rep, err := check(ctx, tc.generator(final.Source), sinkURI, model.Ts(final.CheckpointTs))
	if err != nil {
		tc.t.Fatal(err)
	}
	return rep
}

func verifyStorage(ctx context.Context, g *gen.Generator, sinkURI string, upTo model.Ts) (verify.Report, error) {
	return verify.Storage(ctx, g, sinkURI, upTo)
}

func verifyKafka(ctx context.Context, g *gen.Generator, sinkURI string, upTo model.Ts) (verify.Report, error) {
	return verify.Kafka(ctx, g, sinkURI, upTo)
}

// metricValue returns a series' value in a Prometheus text exposition, or
// -1 when the series is not there.
func metricValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// verifyAll pauses every changefeed and proves each sink holds every
// event in per-key order; exactlyOnce also demands no duplicates (a
// crashed capture may legitimately have written some twice).
func (tc *testCluster) verifyAll(c *api.Client, sinks map[string]string, exactlyOnce bool) {
	tc.t.Helper()
	for name := range sinks {
		tc.pause(c, name)
	}
	// Paused dispatchers stop gracefully and leave an exact checkpoint.
	time.Sleep(2 * time.Second)
	for name, sink := range sinks {
		check := verifyStorage
		if strings.HasPrefix(sink, "kafka://") {
			check = verifyKafka
		}
		rep := tc.verifyPaused(c, name, sink, check)
		if !rep.OK || rep.Lost != 0 || (exactlyOnce && rep.Duplicates != 0) {
			tc.t.Fatalf("%s: %+v", name, rep)
		}
	}
}
