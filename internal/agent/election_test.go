package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// followerOf returns a running node that is not the given leader.
func (tc *testCluster) followerOf(leader model.NodeID) model.NodeID {
	for id := range tc.nodes {
		if id != leader {
			return id
		}
	}
	tc.t.Fatal("no follower")
	return ""
}

// setLiveness writes a liveness change as the coordinator would: fenced
// with the current term.
func (tc *testCluster) setLiveness(id model.NodeID, to model.Liveness) {
	tc.t.Helper()
	enginetest.SetLiveness(tc.t, tc.store, id, to)
}

func TestDrainingAndStoppingNodesNeverCampaign(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(4)
	var followers []model.NodeID
	for _, id := range []model.NodeID{"capture-1", "capture-2", "capture-3", "capture-4"} {
		if id != leader.Node {
			followers = append(followers, id)
		}
	}
	draining, stopping := followers[0], followers[1]
	tc.setLiveness(draining, model.LivenessDraining)
	// A node cannot be made Stopping by someone else while it runs, except
	// through drain completion: Draining → Stopping.
	tc.setLiveness(stopping, model.LivenessDraining)
	tc.setLiveness(stopping, model.LivenessStopping)

	// Their campaign keys are withdrawn...
	tc.eventually("Draining and Stopping nodes withdraw from the election", 10*time.Second, func() bool {
		h := tc.electionHolders()
		return !h[draining] && !h[stopping]
	})
	// ...and stay withdrawn through several hand-overs, which only ever
	// land on Alive nodes.
	c := tc.client()
	for i := 0; i < 4; i++ {
		res, err := c.ResignCoordinator(context.Background(), api.ResignRequest{})
		if err != nil {
			t.Fatalf("resign %d: %v", i, err)
		}
		if got := model.NodeID(res.Coordinator); got == draining || got == stopping {
			t.Fatalf("resign %d: %s became coordinator while %s", i, got, tc.state().LivenessOf(got))
		}
		if res.CoordinatorEpoch <= res.PreviousEpoch {
			t.Fatalf("resign %d: epoch went from %d to %d", i, res.PreviousEpoch, res.CoordinatorEpoch)
		}
		h := tc.electionHolders()
		if h[draining] || h[stopping] {
			t.Fatalf("resign %d: a non-Alive node has an election key: %v", i, h)
		}
	}
	// Their /readyz says they take no new work (Kubernetes takes them
	// out of the Service); an Alive one's is ready.
	for id, want := range map[model.NodeID]string{draining: "is Draining", stopping: "is Stopping", leader.Node: `"ready":true`} {
		tc.eventually(string(id)+"'s /readyz says "+want, 10*time.Second, func() bool {
			return strings.Contains(tc.get(tc.nodes[id].addr, "/readyz"), want)
		})
	}
}

func TestResignWithNoOtherCandidateIsRefused(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(2)
	tc.setLiveness(tc.followerOf(leader.Node), model.LivenessDraining)
	_, err := tc.client().ResignCoordinator(context.Background(), api.ResignRequest{})
	if !api.IsCode(err, api.CodeConflict) {
		t.Fatalf("resign with only a Draining peer: %v, want conflict", err)
	}
	if l, _ := tc.leader(); l.Node != leader.Node || l.Fence != leader.Fence {
		t.Fatalf("coordinator changed after a refused resign: %+v → %+v", leader, l)
	}
}
