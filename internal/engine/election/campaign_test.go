package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// testTTL is the TTL of the bare memberships these tests join (not
// captures): short, so that their expiry is quick to wait for.
const testTTL = 2 * time.Second

func TestCoordinatorResignsWhenItsLivenessLeavesAlive(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	old := c.StartCaptures(3)
	// The node's own shutdown path: Alive → Stopping, written by itself.
	inc := c.State().Nodes[old.Node].Info.Incarnation
	if _, err := c.Store.SetOwnLiveness(context.Background(), old.Node, inc, model.LivenessStopping); err != nil {
		t.Fatal(err)
	}
	c.Eventually("another node takes over from the Stopping coordinator", 10*time.Second, func() bool {
		l, ok := c.Leader()
		return ok && l.Node != old.Node
	})
	if c.ElectionHolders()[old.Node] {
		t.Fatal("the Stopping former coordinator still holds an election key")
	}
}

// The exception is only for the last node: with another Alive node around,
// a Draining node stays Draining when the coordinator leaves.
func TestDrainingNodeWithAlivePeerStaysDraining(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(3)
	draining := c.FollowerOf(leader.Node)
	c.SetLiveness(draining, model.LivenessDraining)
	if err := c.Stop(leader.Node); err != nil {
		t.Fatal(err)
	}
	next := c.WaitLeader()
	if next.Node == draining {
		t.Fatal("the Draining node became coordinator while an Alive node was available")
	}
	if got := c.State().LivenessOf(draining); got != model.LivenessDraining {
		t.Fatalf("Draining node is now %s", got)
	}
}

// A coordinator that lost its lease while paused, and wakes after another
// node won, must not be able to write anything.
func TestDeposedCoordinatorWritesAreFenced(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	ctx := context.Background()
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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
	before, err := c.Client.Get(ctx, c.Store.Keys().Liveness("bystander"))
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
	after, err := c.Client.Get(ctx, c.Store.Keys().Liveness("bystander"))
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

// A record this agent cannot read keeps the node out of scheduling and
// out of the election.
func TestUnreadableLivenessIsNeverSchedulable(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(2)
	other := c.FollowerOf(leader.Node)
	if _, err := c.Client.Put(context.Background(), c.Store.Keys().Liveness(other), `{"state":"Hibernating"}`); err != nil {
		t.Fatal(err)
	}
	if got := c.State().LivenessOf(other); got != model.LivenessUnknown || got.IsSchedulable() || got.MayCampaign() {
		t.Fatalf("unreadable record reads as %s", got)
	}
	c.Eventually("the node with an unreadable record withdraws from the election", 30*time.Second, func() bool {
		return !c.ElectionHolders()[other]
	})
}

// A candidacy a campaign leaves behind (etcd's recipe does when the
// campaign is given up while its key is being written) is what Withdraw
// deletes: Withdraw names the key the recipe writes. It named another
// one, so such a stale candidacy stood in the queue until the session
// ended, in front of every later candidate.
func TestWithdrawRemovesTheCandidacyACampaignWrote(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
	ctx := context.Background()
	store := meta.NewStore(c.Client, "withdraw")
	m, err := cluster.Join(ctx, store, model.NodeInfo{ID: "n1", Address: "n1"}, testTTL, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave()
	e := election.NewEtcd(m.Session(), store.Keys(), "n1")
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holders := func() map[model.NodeID]bool { return enginetest.ElectionHolders(t, store) }
	if !holders()["n1"] {
		t.Fatalf("no candidacy of n1 under %s after its campaign (key %s)", store.Keys().ElectionPrefix(), term.Fence.Key)
	}
	if err := e.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if holders()["n1"] {
		t.Fatalf("n1's candidacy %s is still there after Withdraw", term.Fence.Key)
	}
}
