package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The snapshot the planner reads carries the etcd mod-revisions of exactly
// the objects it describes, so a write to one object changes only that
// object's revision.
func TestSnapshotCarriesEtcdRevisions(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3)
	ctx := context.Background()
	snap := c.State().Snapshot()
	if snap.ClusterID != "test" || len(snap.Nodes) != 3 || snap.Coordinator != leader.Node || snap.CoordinatorEpoch != leader.Fence.Epoch() {
		t.Fatalf("snapshot %+v, leader %+v", snap, leader)
	}
	for _, n := range snap.Nodes {
		for key, rev := range map[string]model.Revision{
			c.Store.Keys().Node(n.Info.ID):     n.NodeRevision,
			c.Store.Keys().Liveness(n.Info.ID): n.LivenessRevision,
		} {
			resp, err := c.Client.Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("get %s: %v", key, err)
			}
			if model.Revision(resp.Kvs[0].ModRevision) != rev {
				t.Errorf("%s: snapshot says revision %d, etcd %d", key, rev, resp.Kvs[0].ModRevision)
			}
		}
		if n.Coordinator != (n.Info.ID == leader.Node) {
			t.Errorf("%s: coordinator flag %v", n.Info.ID, n.Coordinator)
		}
	}
	if got := len(snap.SchedulableNodes()); got != 3 {
		t.Fatalf("%d schedulable nodes, want 3", got)
	}

	target := c.FollowerOf(leader.Node)
	c.SetLiveness(target, model.LivenessDraining)
	after := c.State().Snapshot()
	for _, n := range after.Nodes {
		old, _ := snap.Node(n.Info.ID)
		changed := n.LivenessRevision != old.LivenessRevision || n.NodeRevision != old.NodeRevision
		if changed != (n.Info.ID == target) {
			t.Errorf("%s: revisions changed=%v after a write to %s only", n.Info.ID, changed, target)
		}
	}
	if got := len(after.SchedulableNodes()); got != 2 {
		t.Fatalf("%d schedulable nodes with one Draining, want 2", got)
	}
	// Every capture's watched view agrees.
	c.Eventually("every view sees the Draining node as unschedulable", 15*time.Second, func() bool {
		for _, id := range c.IDs() {
			inc := c.Capture(id).Current()
			if inc == nil {
				return false
			}
			sched, cand := inc.View.SchedulableNodes(), inc.View.CoordinatorCandidates()
			if len(sched) != 2 || len(cand) != 2 {
				return false
			}
			for _, id := range append(sched, cand...) {
				if id == target {
					return false
				}
			}
		}
		return true
	})
}
