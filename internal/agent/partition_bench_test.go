package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The partition issue's benchmark: the pause of a split and the busy time
// of a graceful move, under the demo load, on loopback. The baseline,
// measured in the same run on the same etcd, is one write seen through a
// watch: the least any routing change can cost. A measurement, not a
// test (CDCCTL_BENCH=1); docs/benchmarks.md has the numbers:
//
//	CDCCTL_BENCH=1 go test -count=1 -run TestPartitionOpsBenchmark -v ./internal/agent
func TestPartitionOpsBenchmark(t *testing.T) {
	if os.Getenv("CDCCTL_BENCH") == "" {
		t.Skip("a measurement: CDCCTL_BENCH=1")
	}
	rounds := 40
	tc := newTestCluster(t)
	tc.hub = nil // separate processes talk gRPC; so do these nodes
	tc.startCaptures(3)
	c := tc.client()
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	g := tc.runDemoGen(c, sink)
	cps := watchCheckpoints(t, tc, "demo")
	var pauses, moves, hops, caughtUp, passes []time.Duration
	for round := range rounds {
		hops = append(hops, watchHop(t, tc))
		// The baseline of the checkpoint's part: how long after an
		// instant without a move the checkpoint passes it.
		caughtUp = append(caughtUp, cps.passes(model.TsFromTime(time.Now())))
		// Split the widest partition of a table, then move its upper half.
		table := g.TableNames()[round%len(g.TableNames())]
		var victim model.RouteEntry
		width := -1
		for _, r := range tc.state().SortedPartitions("demo") {
			if n := keysIn(g, r.Route.Span); r.Route.Span.Table == table && n > width {
				victim, width = r.Route, n
			}
		}
		key, _ := enginetest.MiddleKey(g, victim.Span)
		tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, victim.ID, key, plan.DefaultCosts) })
		pauses = append(pauses, tc.lastBusy(victim.ID, "split"))
		var upper model.RouteEntry
		for _, r := range tc.state().Partitions["demo"] {
			if r.Route.Span.Table == table && r.Route.Span.Start == key {
				upper = r.Route
			}
		}
		to := tc.followerOf(upper.Node)
		tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, upper.ID, to, plan.DefaultCosts) })
		moves = append(moves, tc.lastBusy(upper.ID, "moved"))
		// The move as the changefeed's checkpoint sees it: the
		// partition held it at its hand-over position until the target
		// reported a position past it and the maintainer persisted it.
		passes = append(passes, cps.passes(tc.state().Partitions["demo"][upper.ID].Route.Start))
	}
	rep := tc.pauseAndVerify(c, "demo", sink, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after the benchmark: %+v", rep)
	}
	hop := pct(hops, 50)
	t.Logf("%d splits and %d moves under %s; %d events verified, 0 lost, 0 duplicates", rounds, rounds, demoSource, rep.Expected)
	t.Logf("baseline, one etcd write seen through a watch: p50 %s p99 %s", hop, pct(hops, 99))
	t.Logf("split pause:      p50 %s p99 %s max %s (p50 %.1f× the baseline)", pct(pauses, 50), pct(pauses, 99), pct(pauses, 100), ratio(pct(pauses, 50), hop))
	t.Logf("graceful move:    p50 %s p99 %s max %s (p50 %.1f× the baseline)", pct(moves, 50), pct(moves, 99), pct(moves, 100), ratio(pct(moves, 50), hop))
	t.Logf("checkpoint past an instant without a move: p50 %s p99 %s; past a move's hand-over: p50 %s p99 %s max %s (p50 %.2f×, p99 %.2f×)",
		pct(caughtUp, 50), pct(caughtUp, 99), pct(passes, 50), pct(passes, 99), pct(passes, 100),
		ratio(pct(passes, 50), pct(caughtUp, 50)), ratio(pct(passes, 99), pct(caughtUp, 99)))
}

// checkpoints are a changefeed's checkpoints as etcd held them, each
// with when a watch saw it.
type checkpoints struct {
	t    *testing.T
	mu   sync.Mutex
	seen []seenCheckpoint
}

type seenCheckpoint struct {
	at time.Time
	cp model.Ts
}

// watchCheckpoints records every checkpoint of cf written from now on.
func watchCheckpoints(t *testing.T, tc *testCluster, cf model.ChangefeedID) *checkpoints {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cps := &checkpoints{t: t}
	w := tc.cli.Watch(ctx, tc.store.Keys().ChangefeedStatus(cf), clientv3.WithCreatedNotify())
	if created := <-w; !created.Created {
		t.Fatalf("the watch did not start: %v", created.Err())
	}
	go func() {
		for resp := range w {
			at := time.Now()
			for _, ev := range resp.Events {
				var st model.ChangefeedStatus
				if json.Unmarshal(ev.Kv.Value, &st) == nil {
					cps.mu.Lock()
					cps.seen = append(cps.seen, seenCheckpoint{at: at, cp: st.CheckpointTs})
					cps.mu.Unlock()
				}
			}
		}
	}()
	return cps
}

// passes waits until a checkpoint past ts is seen and says how long
// after ts (its wall-clock time) it was written.
func (c *checkpoints) passes(ts model.Ts) time.Duration {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		for _, s := range c.seen {
			if s.cp > ts {
				c.mu.Unlock()
				return s.at.Sub(ts.Time())
			}
		}
		c.mu.Unlock()
	}
	c.t.Fatalf("no checkpoint past %v in 30 s", ts.Time())
	return 0
}

func keysIn(g *gen.Generator, s model.Span) int {
	n := 0
	for i := range g.Config().Keys {
		if s.Contains(g.Key(i)) {
			n++
		}
	}
	return n
}

// watchHop is one write to etcd seen by a watcher on another client.
func watchHop(t *testing.T, tc *testCluster) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "/bench/watch-hop"
	other, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	w := tc.cli.Watch(ctx, key, clientv3.WithCreatedNotify())
	if created := <-w; !created.Created {
		t.Fatalf("the watch did not start: %v", created.Err())
	}
	began := time.Now()
	if _, err := other.Put(ctx, key, fmt.Sprint(began.UnixNano())); err != nil {
		t.Fatal(err)
	}
	for resp := range w {
		if len(resp.Events) > 0 {
			return time.Since(began)
		}
	}
	t.Fatal("the watch ended")
	return 0
}

func pct(d []time.Duration, q int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*q/100)].Round(100 * time.Microsecond)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, time.Microsecond)) }

// lastBusy is how long a demo partition was busy in its last history
// event, which must be of the given kind.
func (tc *testCluster) lastBusy(pid, kind string) time.Duration {
	tc.t.Helper()
	h := tc.state().Partitions["demo"][pid].Route.History
	if len(h) == 0 || h[len(h)-1].Kind != kind || h[len(h)-1].Busy == 0 {
		tc.t.Fatalf("%s: history %+v, want a last %s event with its busy time", pid, h, kind)
	}
	return h[len(h)-1].Busy
}
