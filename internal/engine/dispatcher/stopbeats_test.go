package dispatcher_test

import (
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed whose sink has stalled is paused: its dispatchers' stops
// wait for the sink's flush (up to 30 s). The node's heartbeats go on
// meanwhile, so another changefeed on the same capture keeps its
// checkpoint moving; before, the node sent none until every stop ended,
// and every changefeed on it lagged as long. Both end verified.
func TestAStopWaitingOnAStalledSinkHoldsNoOtherChangefeedsCheckpoint(t *testing.T) {
	t.Parallel()
	kc, err := kafkatest.Start(1, "slow", 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	t.Cleanup(kc.Heal) // before Close: nothing left waiting on the broker
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(1)
	tc.CreateChangefeed("fast", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.CreateChangefeed("slow", "gen://?tables=2&keys=50&rate=200", "kafka://"+kc.Addrs()+"/slow", 2)
	tc.WaitCheckpoint("fast", model.TsFromTime(time.Now()))
	tc.WaitCheckpoint("slow", model.TsFromTime(time.Now()))

	kc.Stall()
	time.Sleep(300 * time.Millisecond) // the slow sink's writes pile up unacknowledged
	stalledAt := tc.Changefeed("slow").Status.CheckpointTs
	tc.SetState("slow", model.ChangefeedPaused)
	paused := time.Now()
	tc.Eventually("fast's checkpoint past the pause of slow", 10*time.Second, func() bool {
		return tc.Changefeed("fast").Status.CheckpointTs > model.TsFromTime(paused.Add(time.Second))
	})
	if e := tc.Changefeed("slow"); e.Status.CheckpointTs > model.TsFromTime(paused) {
		t.Fatalf("slow's checkpoint moved past its stall: %v", e.Status.CheckpointTs)
	}
	kc.Heal()
	if rep := tc.PauseAndVerify("fast"); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("fast: %+v", rep)
	}
	// Healed before its stops gave up: they end gracefully, and report
	// where they stopped, past where the sink stalled.
	tc.Eventually("slow's final positions", 45*time.Second, func() bool {
		return tc.Changefeed("slow").Status.CheckpointTs > stalledAt
	})
	if rep := tc.VerifyPaused("slow"); !rep.OK || rep.Lost != 0 {
		t.Fatalf("slow: %+v", rep)
	}
}

// A changefeed whose dispatchers cannot start (their sink's open hangs,
// here a start held by a fault hook) holds back no other changefeed's
// checkpoint on the same capture: the node's heartbeats go on while the
// starts wait.
func TestAStartThatHangsHoldsNoOtherChangefeedsCheckpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	hang := func(r model.RouteEntry) error {
		if r.Changefeed == "stuck" {
			<-release
		}
		return nil
	}
	tc := enginetest.New(t, enginetest.Options{Faults: map[model.NodeID]capture.Faults{"capture-1": {FailStart: hang}}})
	tc.StartCaptures(1)
	tc.CreateChangefeed("fast", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitCheckpoint("fast", model.TsFromTime(time.Now()))
	tc.CreateChangefeed("stuck", "gen://?tables=2&keys=50&rate=200", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	created := time.Now()
	tc.Eventually("fast's checkpoint past stuck's creation", 10*time.Second, func() bool {
		return tc.Changefeed("fast").Status.CheckpointTs > model.TsFromTime(created.Add(time.Second))
	})
	let()
	tc.WaitCheckpoint("stuck", model.TsFromTime(time.Now()))
	if rep := tc.PauseAndVerify("fast"); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("fast: %+v", rep)
	}
	if rep := tc.PauseAndVerify("stuck"); !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("stuck: %+v", rep)
	}
}
