package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Issue 14's forged heartbeat, through the engine: on the gRPC transport
// without TLS (where a message's sender is what it says), anyone who can
// reach a port claims to be a partition's owner and reports its
// checkpoint 30 s in the future, for 2 s, under load. The partition is
// then moved. Before the maintainer refused positions beyond its clock,
// the move resumed the partition there and verify found 975 rows lost;
// now it finds none, and no duplicates (the move is graceful).
func TestAForgedHeartbeatDoesNotMakeAMoveSkipRows(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	tc.hub = nil // the real gRPC transport, without TLS
	tc.startCaptures(3)
	c := tc.client()
	sinks := tc.createFeeds(c, 1)
	const cf = "cf00"
	tc.waitCheckpoint(c, cf, model.TsFromTime(time.Now().Add(time.Second)))

	st := tc.state()
	maintainer := st.Changefeeds[cf].Maintainer
	var victim model.RouteEntry
	for _, r := range st.SortedPartitions(cf) {
		if r.Route.Status == model.PartitionActive && r.Route.Node != "" {
			victim = r.Route
			break
		}
	}
	if victim.ID == "" {
		t.Fatal("no active partition")
	}
	forger := transport.NewGRPC(victim.Node, func(id model.NodeID) (string, bool) {
		rn, ok := tc.nodes[id]
		if !ok {
			return "", false
		}
		return rn.addr, true
	})
	defer forger.Close()
	sent := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ahead := model.TsFromTime(time.Now().Add(30 * time.Second))
		msg, err := transport.NewMessage(victim.Node, maintainer.Node, transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: maintainer.Epoch,
			Partitions: []transport.PartitionProgress{{ID: victim.ID, Progress: model.Progress{Checkpoint: ahead, Epoch: victim.Epoch, Node: victim.Node}}}})
		if err != nil {
			t.Fatal(err)
		}
		if forger.Send(context.Background(), msg) == nil {
			sent++
		}
	}
	if sent == 0 {
		t.Fatal("no forged heartbeat reached the maintainer: the test proves nothing")
	}
	to := tc.followerOf(victim.Node)
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, victim.ID, to, plan.DefaultCosts) })
	tc.waitCheckpoint(c, cf, model.TsFromTime(time.Now().Add(time.Second)))
	tc.verifyAll(c, sinks, true)
	if !tc.tail.Warned("refused a position beyond the clock") {
		t.Fatal("the maintainer did not log the refused position")
	}
}
