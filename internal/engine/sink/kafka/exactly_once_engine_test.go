package kafka_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Issue 31 on the engine: two changefeeds of the same load, one
// exactly once and one at least once, into one Kafka cluster (kfake),
// on three captures; the capture holding partitions of both meets a
// fault; both verified read_committed (enginetest.CompareDelivery).
func kafkaDelivery(t *testing.T, fault func(tc *enginetest.Cluster, victim model.NodeID)) (once, least verify.Report) {
	c := broker(t, "once", "least")
	addr := strings.Join(c.ListenAddrs(), ",")
	tc := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	return enginetest.CompareDelivery(tc, fmt.Sprintf("kafka://%s/once?delivery=exactly-once", addr), fmt.Sprintf("kafka://%s/least", addr),
		func(victim model.NodeID) { fault(tc, victim) })
}

func TestExactlyOnceThroughTheCrashOfACapture(t *testing.T) {
	t.Parallel()
	once, least := kafkaDelivery(t, func(tc *enginetest.Cluster, victim model.NodeID) {
		tc.Crash(victim) // kill -9; its lease expired at once
		tc.RunOff(victim)
	})
	t.Logf("kill -9 of a capture: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}

// The capture is cut off from etcd and from the other captures past its
// session's TTL, and comes back once its partitions run elsewhere: a
// zombie, stopped by its tenure checks and, past them, by Kafka's
// fencing of its producers.
func TestExactlyOnceThroughAZombieCapture(t *testing.T) {
	t.Parallel()
	once, least := kafkaDelivery(t, func(tc *enginetest.Cluster, victim model.NodeID) {
		tc.Isolate(victim)
	})
	t.Logf("a capture frozen past its TTL, then back: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}
