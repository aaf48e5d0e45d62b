package maintainer_test

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/maintainer"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Heartbeats that are stale (an older maintainer placement, an older
// placement of the partition) or that come from a capture the partition
// is not on are dropped: the maintainer's progress record in etcd never
// shows them. A current one, sent right after them, lands: the maintainer
// handles a capture's messages in order, so by then it has seen the
// others.
func TestStaleHeartbeatsAreDropped(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(2)
	ctx := context.Background()
	c.CreateChangefeed("demo", "gen://?tables=2&keys=50&rate=200", "blackhole://", 4)
	c.Warm("demo", 300*time.Millisecond)

	st := c.State()
	e := st.Changefeeds["demo"]
	byNode := map[model.NodeID][]string{}
	for pid, r := range st.Partitions["demo"] {
		byNode[r.Route.Node] = append(byNode[r.Route.Node], pid)
	}
	var node, other model.NodeID
	for n, pids := range byNode {
		if len(pids) >= 2 {
			node = n
		}
	}
	for _, n := range c.IDs() {
		if n != node {
			other = n
		}
	}
	if node == "" || other == "" {
		t.Fatalf("need a capture with two partitions and another capture: %v", byNode)
	}
	p, q := byNode[node][0], byNode[node][1]
	routeEpoch := st.Partitions["demo"][p].Route.Epoch
	// Ahead of what the dispatchers report for a few seconds, but within
	// the clock's tolerance (a position beyond it is refused outright:
	// the agent's TestAForgedHeartbeatDoesNotMakeAMoveSkipRows).
	future := model.TsFromTime(time.Now().Add(maintainer.MaxAhead - 2*time.Second))

	beat := func(from model.NodeID, maintainerEpoch uint64, pid string, epoch uint64, cp model.Ts) {
		t.Helper()
		m, err := transport.NewMessage(from, e.Maintainer.Node, transport.TopicHeartbeat, transport.Heartbeat{
			Changefeed: "demo", MaintainerEpoch: maintainerEpoch,
			Partitions: []transport.PartitionProgress{{ID: pid, Progress: model.Progress{Checkpoint: cp, Node: from, Epoch: epoch}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Hub.Inject(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	beat(node, e.Maintainer.Epoch-1, p, routeEpoch, future)                         // an older maintainer placement
	beat(node, e.Maintainer.Epoch, p, routeEpoch-1, future)                         // an older placement of the partition
	beat(node, e.Maintainer.Epoch, p, routeEpoch+1, future)                         // a placement etcd does not know
	beat(other, e.Maintainer.Epoch, p, routeEpoch, future)                          // not the partition's capture
	beat(node, e.Maintainer.Epoch, q, st.Partitions["demo"][q].Route.Epoch, future) // current: lands

	c.Eventually("the current heartbeat's position persisted", 10*time.Second, func() bool {
		return c.State().Progress["demo"][q].Progress.Checkpoint >= future
	})
	if got := c.State().Progress["demo"][p].Progress.Checkpoint; got >= future {
		t.Fatalf("a stale or forged heartbeat was persisted: %s has checkpoint %s", p, got)
	}
}
