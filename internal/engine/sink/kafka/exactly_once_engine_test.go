package kafka_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Issue 31 on the engine: two changefeeds of the same load, one
// exactly once and one at least once, into one Kafka cluster (kfake),
// on three captures. The capture holding partitions of both meets a
// fault; each changefeed is then paused and verified read_committed: 0
// lost and 0 out of order for both, 0 duplicates for the exactly-once
// one, and the at-least-once one's duplicates counted beside it.
func exactlyOnceAgainstAtLeastOnce(t *testing.T, fault func(tc *enginetest.Cluster, victim model.NodeID)) (once, least verify.Report) {
	c := broker(t, "eo", "alo")
	addr := strings.Join(c.ListenAddrs(), ",")
	tc := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	leader := tc.StartCaptures(3)
	const src = "gen://?tables=4&keys=100&rate=1000"
	tc.CreateChangefeed("eo", src, fmt.Sprintf("kafka://%s/eo?delivery=exactly-once", addr), 2)
	tc.CreateChangefeed("alo", src, fmt.Sprintf("kafka://%s/alo", addr), 2)
	tc.Warm("eo", 1500*time.Millisecond)
	tc.Warm("alo", 1500*time.Millisecond)
	victim := tc.FollowerOf(leader.Node)
	for _, cf := range []model.ChangefeedID{"eo", "alo"} {
		if on, _ := tc.PartitionsOn(cf, victim); on == 0 {
			t.Fatalf("%s runs no partition of %s: the fault would prove nothing", victim, cf)
		}
	}
	fault(tc, victim)
	for _, cf := range []model.ChangefeedID{"eo", "alo"} {
		tc.WaitCheckpoint(cf, model.TsFromTime(time.Now().Add(time.Second)))
	}
	once, least = tc.PauseAndVerify("eo"), tc.PauseAndVerify("alo")
	if !once.OK || once.Duplicates != 0 || once.Expected < 3000 {
		t.Fatalf("exactly once: %+v", once)
	}
	if !least.OK || least.Expected < 3000 {
		t.Fatalf("at least once: %+v", least)
	}
	return once, least
}

func TestExactlyOnceThroughTheCrashOfACapture(t *testing.T) {
	t.Parallel()
	once, least := exactlyOnceAgainstAtLeastOnce(t, func(tc *enginetest.Cluster, victim model.NodeID) {
		tc.Crash(victim) // kill -9; its lease expired at once
		runOff(tc, victim)
	})
	t.Logf("kill -9 of a capture: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}

// The capture is cut off from etcd and from the other captures past its
// session's TTL (as a SIGSTOPped agent is, as far as the cluster can
// tell; in process it runs on): its partitions start elsewhere, and
// when it is back it is a zombie whose producers Kafka has fenced.
func TestExactlyOnceThroughAZombieCapture(t *testing.T) {
	t.Parallel()
	once, least := exactlyOnceAgainstAtLeastOnce(t, func(tc *enginetest.Cluster, victim model.NodeID) {
		for _, id := range tc.IDs() {
			if id != victim {
				tc.Hub.Cut(victim, id)
			}
		}
		tc.Link(victim).Freeze()
		runOff(tc, victim)
		time.Sleep(time.Second)
		tc.Link(victim).Thaw()
		for _, id := range tc.IDs() {
			if id != victim {
				tc.Hub.Heal(victim, id)
			}
		}
	})
	t.Logf("a capture frozen past its TTL, then back: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}

// runOff waits until no partition of either changefeed is placed on
// victim.
func runOff(tc *enginetest.Cluster, victim model.NodeID) {
	tc.T.Helper()
	for _, cf := range []model.ChangefeedID{"eo", "alo"} {
		tc.Eventually("the partitions of "+string(cf)+" run off "+string(victim), 60*time.Second, func() bool {
			on, _ := tc.PartitionsOn(cf, victim)
			return on == 0
		})
	}
}
