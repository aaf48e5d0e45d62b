package kafka_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Issue 31 on the engine: two changefeeds of the same load, one exactly
// once and one at least once, into one Kafka cluster (kfake), on three
// captures (enginetest.CompareDelivery). The capture holding partitions
// of both is killed (kill -9, its lease expired at once); then another
// is cut off from etcd and from the other captures past its session's
// TTL, and comes back once its partitions run elsewhere: a zombie,
// stopped by its tenure checks and, past them, by Kafka's fencing of its
// producers. Both verified read_committed.
func TestExactlyOnceThroughACrashAndAZombie(t *testing.T) {
	t.Parallel()
	c := broker(t, "once", "least")
	addr := strings.Join(c.ListenAddrs(), ",")
	tc := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	once, least := enginetest.CompareDelivery(tc, fmt.Sprintf("kafka://%s/once?delivery=exactly-once", addr), fmt.Sprintf("kafka://%s/least", addr),
		func(victim model.NodeID) { tc.CrashThenIsolate(victim, "once") })
	t.Logf("kill -9 of a capture, then another frozen past its TTL and back: exactly once %d events, 0 lost, %d duplicates; at least once %d events, 0 lost, %d duplicates",
		once.Expected, once.Duplicates, least.Expected, least.Duplicates)
}
