package coordinator_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A capture crashes mid-stream: once its lease is gone its partitions
// and (if it had one) its maintainer are placed elsewhere and resume from
// the last reported checkpoints. Nothing is lost; the rows written after
// the last report are written again and counted as duplicates.
func TestACrashedCaptureIsRescheduledWithoutLoss(t *testing.T) {
	t.Parallel()
	tc := enginetest.New(t, enginetest.Options{})
	leader := tc.StartCaptures(3)
	tc.CreateChangefeed("demo", "gen://?tables=8&keys=200&rate=1500&ddl_every=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	cp := tc.Warm("demo", 1500*time.Millisecond)
	victim := tc.FollowerOf(leader.Node)
	if on, _ := tc.PartitionsOn("demo", victim); on == 0 {
		t.Fatalf("%s runs no partition: the crash would prove nothing", victim)
	}
	tc.Crash(victim)
	tc.Eventually("the crashed capture's partitions run elsewhere", 30*time.Second, func() bool {
		on, _ := tc.PartitionsOn("demo", victim)
		return on == 0
	})
	if n, _ := tc.State().MaintainerNode("demo"); n == victim {
		t.Fatalf("the maintainer is still on the crashed %s", victim)
	}
	tc.WaitCheckpoint("demo", cp+model.TsFromMillis(2000))
	rep := tc.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 || rep.Expected < 5000 {
		t.Fatalf("verify after a crash: %+v", rep)
	}
	t.Logf("verified %d events after a crash: %d lost, %d duplicates (at-least-once), %d out of order", rep.Expected, rep.Lost, rep.Duplicates, rep.OutOfOrder)
}
