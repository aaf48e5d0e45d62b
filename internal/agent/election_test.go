package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
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
	l, ok := tc.leader()
	if !ok {
		tc.t.Fatal("no leader to write with")
	}
	if _, err := tc.store.SetLiveness(context.Background(), id, to, model.ReasonNormal, l.Fence); err != nil {
		tc.t.Fatalf("set %s %s: %v", id, to, err)
	}
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
}

func TestCoordinatorResignsWhenItsLivenessLeavesAlive(t *testing.T) {
	tc := newTestCluster(t)
	old := tc.startCaptures(3)
	// The node's own shutdown path: Alive → Stopping, written by itself.
	inc := tc.state().Nodes[old.Node].Info.Incarnation
	if _, err := tc.store.SetOwnLiveness(context.Background(), old.Node, inc, model.LivenessStopping); err != nil {
		t.Fatal(err)
	}
	tc.eventually("another node takes over from the Stopping coordinator", 10*time.Second, func() bool {
		l, ok := tc.leader()
		return ok && l.Node != old.Node
	})
	if tc.electionHolders()[old.Node] {
		t.Fatal("the Stopping former coordinator still holds an election key")
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

// Seed 000's single exception (its scenario 7): in a two-capture cluster
// the coordinator crashes during a drain of the other capture. When the
// coordinator's lease expires, the Draining capture is the only node left:
// it returns to Alive, the drain record is cleared, and it leads.
func TestOnlyNodeLeftReturnsToAliveAndLeads(t *testing.T) {
	t.Parallel()
	var tc *testCluster
	var survivor model.NodeID
	for attempt := 1; ; attempt++ {
		tc = newTestCluster(t)
		leader := tc.startCaptures(2)
		survivor = tc.followerOf(leader.Node)
		// The coordinator had just started a drain when it crashed: the
		// record lands within its term, which lasts until its lease
		// expires. A crashing node closes its etcd client, and now and
		// then its runner gives the term up before the record is written:
		// then the scenario did not happen, and it is set up again.
		tc.nodes[leader.Node].node.crash()
		_, err := tc.store.StartDrain(context.Background(), leader.Fence, model.DrainRecord{Target: survivor, BatchSize: 1, StartTime: time.Now()})
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "no longer the coordinator") {
			t.Logf("attempt %d: the term ended before the drain record was written (%v); setting up again", attempt, err)
			tc.stopAll()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		tc.crash(leader.Node)
		break
	}
	tc.eventually("the only node left leads", 15*time.Second, func() bool {
		l, ok := tc.leader()
		return ok && l.Node == survivor
	})
	st := tc.state()
	if got := st.LivenessOf(survivor); got != model.LivenessAlive {
		t.Fatalf("survivor is %s, want Alive", got)
	}
	if st.Drain != nil {
		t.Fatalf("drain record still in etcd: %+v", st.Drain)
	}
}

// The exception is only for the last node: with another Alive node around,
// a Draining node stays Draining when the coordinator leaves.
func TestDrainingNodeWithAlivePeerStaysDraining(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	draining := tc.followerOf(leader.Node)
	tc.setLiveness(draining, model.LivenessDraining)
	if err := tc.stop(leader.Node); err != nil {
		t.Fatal(err)
	}
	next := tc.waitLeader()
	if next.Node == draining {
		t.Fatal("the Draining node became coordinator while an Alive node was available")
	}
	if got := tc.state().LivenessOf(draining); got != model.LivenessDraining {
		t.Fatalf("Draining node is now %s", got)
	}
}

// A coordinator that lost its lease while paused, and wakes after another
// node won, must not be able to write anything.
func TestDeposedCoordinatorWritesAreFenced(t *testing.T) {
	tc := newTestCluster(t)
	ctx := context.Background()
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	join := func(cli *clientv3.Client, id model.NodeID) (*meta.Store, *cluster.Member) {
		store := meta.NewStore(cli, "test")
		m, err := cluster.Join(ctx, store, model.NodeInfo{ID: id, Address: string(id)}, testTTL, meta.Previous{})
		if err != nil {
			t.Fatal(err)
		}
		return store, m
	}
	storeA, memberA := join(newClient(), "old-coordinator")
	storeB, memberB := join(newClient(), "new-coordinator")
	defer memberB.Leave()
	_, memberC := join(newClient(), "bystander")
	defer memberC.Leave()

	termA, err := election.NewEtcd(memberA.Session(), storeA.Keys(), "old-coordinator").Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// While A leads, its fenced writes land.
	if _, err := storeA.SetLiveness(ctx, "bystander", model.LivenessDraining, model.ReasonNormal, termA.Fence); err != nil {
		t.Fatalf("write during the term: %v", err)
	}
	before, err := tc.cli.Get(ctx, tc.store.Keys().Liveness("bystander"))
	if err != nil {
		t.Fatal(err)
	}

	// A pauses: its keepalives stop and its lease runs out...
	memberA.Abandon()
	campaignB, cancel := context.WithTimeout(ctx, 3*testTTL+5*time.Second)
	defer cancel()
	// ...and B, campaigning all along, wins once A's key expires.
	termB, err := election.NewEtcd(memberB.Session(), storeB.Keys(), "new-coordinator").Campaign(campaignB)
	if err != nil {
		t.Fatalf("B never won: %v", err)
	}
	if termB.Epoch() <= termA.Epoch() {
		t.Fatalf("new epoch %d is not after old epoch %d", termB.Epoch(), termA.Epoch())
	}

	// A wakes up and, still believing it leads, writes with its old term.
	_, err = storeA.SetLiveness(ctx, "bystander", model.LivenessStopping, model.ReasonNormal, termA.Fence)
	if !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("deposed coordinator's liveness write: %v, want ErrFenced", err)
	}
	if _, err := storeA.DeleteStaleLiveness(ctx, termA.Fence, "old-coordinator", 1); !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("deposed coordinator's cleanup write: %v, want ErrFenced", err)
	}
	// etcd shows no trace of it: the record is exactly as before.
	after, err := tc.cli.Get(ctx, tc.store.Keys().Liveness("bystander"))
	if err != nil {
		t.Fatal(err)
	}
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision || string(after.Kvs[0].Value) != string(before.Kvs[0].Value) {
		t.Fatalf("liveness of bystander changed after the fenced write:\nbefore %s\nafter  %s", before.Kvs[0].Value, after.Kvs[0].Value)
	}
	// Even a no-op write tells the deposed coordinator it is fenced.
	if _, err := storeA.SetLiveness(ctx, "bystander", model.LivenessDraining, model.ReasonNormal, termA.Fence); !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("deposed coordinator's no-op write: %v, want ErrFenced", err)
	}
	// The same write with the new term lands.
	fenceB, err := storeB.FenceFor(ctx, termB.Fence, "new-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storeB.SetLiveness(ctx, "bystander", model.LivenessStopping, model.ReasonNormal, fenceB); err != nil {
		t.Fatalf("new coordinator's write: %v", err)
	}
	// A coordinator whose own liveness left Alive is fenced too, even
	// before it notices: the fence pins its own record.
	if _, err := storeB.SetOwnLiveness(ctx, "new-coordinator", memberB.Info().Incarnation, model.LivenessStopping); err != nil {
		t.Fatal(err)
	}
	if _, err := storeB.DeleteStaleLiveness(ctx, fenceB, "old-coordinator", 1); !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("write by a Stopping coordinator: %v, want ErrFenced", err)
	}
}

func TestLivenessTransitionsInEtcd(t *testing.T) {
	tc := newTestCluster(t)
	ctx := context.Background()
	for _, tt := range []struct {
		from, to model.Liveness
		ok       bool
	}{
		{model.LivenessAlive, model.LivenessDraining, true},
		{model.LivenessAlive, model.LivenessStopping, true},
		{model.LivenessDraining, model.LivenessStopping, true},
		{model.LivenessDraining, model.LivenessAlive, false},
		{model.LivenessStopping, model.LivenessAlive, false},
		{model.LivenessStopping, model.LivenessDraining, false},
	} {
		t.Run(tt.from.String()+"→"+tt.to.String(), func(t *testing.T) {
			id := model.NodeID("n-" + tt.from.String() + "-" + tt.to.String())
			m, err := cluster.Join(ctx, tc.store, model.NodeInfo{ID: id}, testTTL, meta.Previous{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Leave()
			// Walk from Alive to the starting state.
			path := map[model.Liveness][]model.Liveness{
				model.LivenessAlive:    nil,
				model.LivenessDraining: {model.LivenessDraining},
				model.LivenessStopping: {model.LivenessStopping},
			}[tt.from]
			inc := m.Info().Incarnation
			for _, step := range path {
				if _, err := tc.store.SetOwnLiveness(ctx, id, inc, step); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := tc.cli.Get(ctx, tc.store.Keys().Liveness(id))
			_, err = tc.store.SetOwnLiveness(ctx, id, inc, tt.to)
			got := tc.state().LivenessOf(id)
			if tt.ok && (err != nil || got != tt.to) {
				t.Fatalf("allowed transition: err %v, etcd has %s", err, got)
			}
			if !tt.ok {
				after, _ := tc.cli.Get(ctx, tc.store.Keys().Liveness(id))
				if err == nil || got != tt.from || after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
					t.Fatalf("forbidden transition: err %v, etcd has %s", err, got)
				}
			}
		})
	}
}

// A process that loses its session and joins again keeps its liveness: a
// Draining node does not come back Alive. A new process with the same id
// starts Alive, and a process never edits another incarnation's record.
func TestRejoinKeepsLivenessAndNewProcessStartsAlive(t *testing.T) {
	tc := newTestCluster(t)
	ctx := context.Background()
	first, err := cluster.Join(ctx, tc.store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.store.SetOwnLiveness(ctx, "n1", first.Info().Incarnation, model.LivenessDraining); err != nil {
		t.Fatal(err)
	}
	first.Leave() // the session is gone; the process lives on
	again, err := cluster.Join(ctx, tc.store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{Incarnation: first.Info().Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	if got := tc.state().LivenessOf("n1"); got != model.LivenessDraining {
		t.Fatalf("after rejoining: %s, want Draining", got)
	}
	if _, err := tc.store.SetOwnLiveness(ctx, "n1", first.Info().Incarnation, model.LivenessStopping); !errors.Is(err, meta.ErrNotOwnRecord) {
		t.Fatalf("write with the old incarnation: %v", err)
	}
	again.Leave()
	fresh, err := cluster.Join(ctx, tc.store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Leave()
	if got := tc.state().LivenessOf("n1"); got != model.LivenessAlive {
		t.Fatalf("a new process: %s, want Alive", got)
	}
}

// A record this agent cannot read keeps the node out of scheduling and
// out of the election.
func TestUnreadableLivenessIsNeverSchedulable(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(2)
	other := tc.followerOf(leader.Node)
	if _, err := tc.cli.Put(context.Background(), tc.store.Keys().Liveness(other), `{"state":"Hibernating"}`); err != nil {
		t.Fatal(err)
	}
	if got := tc.state().LivenessOf(other); got != model.LivenessUnknown || got.IsSchedulable() || got.MayCampaign() {
		t.Fatalf("unreadable record reads as %s", got)
	}
	tc.eventually("the node with an unreadable record withdraws from the election", 10*time.Second, func() bool {
		return !tc.electionHolders()[other]
	})
}
