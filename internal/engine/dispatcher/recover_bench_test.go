package dispatcher_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Seed 002's benchmark through the whole engine (capture, maintainer,
// heartbeats), where BenchmarkCatchUpAfterAFault measures the sink
// alone: 3 captures, 8 tables × 2 partitions at 1,000 rows/s into Kafka
// (one partition per table), one broker refusing every write for 4 s.
// Each remedy runs in the same test, CDCCTL_BENCH_RECOVER times:
//
//   - dispatcher: recover-timeout=60s, so only the failed dispatchers
//     are re-created by their maintainer;
//   - changefeed: recover-timeout=1s, so the recovery gives up and the
//     changefeed restarts on the captures that saw it fail (R10).
//
// It reports the time from the fault's end until the changefeed's
// checkpoint has passed it, the restarts and dispatcher recoveries, and
// verifies every run (0 lost, 0 out of order). Not part of the README's
// test command:
//
//	CDCCTL_BENCH_RECOVER=3 go test -count=1 -run TestCatchUpThroughTheEngine -v ./internal/engine/dispatcher
func TestCatchUpThroughTheEngine(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("CDCCTL_BENCH_RECOVER"))
	if runs <= 0 {
		t.Skip("a benchmark: set CDCCTL_BENCH_RECOVER to the number of runs")
	}
	type result struct {
		catchUp              time.Duration
		restarts, recoveries int
		events, lost, ooo    uint64
	}
	modes := []struct{ name, params string }{{"dispatcher", "&recover-timeout=60s"}, {"changefeed", "&recover-timeout=1s"}}
	results := map[string][]result{}
	for i := 0; i < runs; i++ {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s-%d", m.name, i+1), func(t *testing.T) {
				rig := newRecoverRig(t, m.params)
				rig.warm()
				rig.kafka.Fail(kerr.NotEnoughReplicas.Code)
				time.Sleep(4 * time.Second)
				rig.kafka.Heal()
				healedAt := time.Now()
				rig.tc.WaitCheckpoint("demo", model.TsFromTime(healedAt))
				counts := rig.tc.RecoveriesTotal()
				r := result{catchUp: time.Since(healedAt), restarts: counts.Restarted["recover_timeout"], recoveries: counts.Recovered}
				rep := rig.verify()
				if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
					t.Fatalf("verify after the %s remedy: %+v", m.name, rep)
				}
				r.events, r.lost, r.ooo = rep.Expected, rep.Lost, rep.OutOfOrder
				results[m.name] = append(results[m.name], r)
				t.Logf("%s: caught up %.2fs after the fault; %v restarts, %v dispatcher recoveries; verified %d events, %d lost, %d out of order",
					m.name, r.catchUp.Seconds(), r.restarts, r.recoveries, r.events, r.lost, r.ooo)
			})
		}
	}
	mean := func(rs []result) (catchUp, restarts, recoveries float64) {
		for _, r := range rs {
			catchUp += r.catchUp.Seconds()
			restarts += float64(r.restarts)
			recoveries += float64(r.recoveries)
		}
		n := float64(len(rs))
		return catchUp / n, restarts / n, recoveries / n
	}
	dc, dr, drec := mean(results["dispatcher"])
	cc, cr, crec := mean(results["changefeed"])
	t.Logf("mean over %d runs: dispatcher %.2fs (%.1f restarts, %.1f recoveries); changefeed %.2fs (%.1f restarts, %.1f recoveries); changefeed/dispatcher = %.2f",
		runs, dc, dr, drec, cc, cr, crec, cc/dc)
}
