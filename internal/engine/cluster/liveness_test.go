package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// testTTL is the TTL of the bare memberships these tests join (not
// captures): short, so that their expiry is quick to wait for.
const testTTL = 2 * time.Second

func TestLivenessTransitionsInEtcd(t *testing.T) {
	c := enginetest.New(t, enginetest.Options{})
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
			m, err := cluster.Join(ctx, c.Store, model.NodeInfo{ID: id}, testTTL, meta.Previous{})
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
				if _, err := c.Store.SetOwnLiveness(ctx, id, inc, step); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := c.Client.Get(ctx, c.Store.Keys().Liveness(id))
			_, err = c.Store.SetOwnLiveness(ctx, id, inc, tt.to)
			got := c.State().LivenessOf(id)
			if tt.ok && (err != nil || got != tt.to) {
				t.Fatalf("allowed transition: err %v, etcd has %s", err, got)
			}
			if !tt.ok {
				after, _ := c.Client.Get(ctx, c.Store.Keys().Liveness(id))
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
	c := enginetest.New(t, enginetest.Options{})
	ctx := context.Background()
	first, err := cluster.Join(ctx, c.Store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store.SetOwnLiveness(ctx, "n1", first.Info().Incarnation, model.LivenessDraining); err != nil {
		t.Fatal(err)
	}
	first.Leave() // the session is gone; the process lives on
	again, err := cluster.Join(ctx, c.Store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{Incarnation: first.Info().Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.State().LivenessOf("n1"); got != model.LivenessDraining {
		t.Fatalf("after rejoining: %s, want Draining", got)
	}
	if _, err := c.Store.SetOwnLiveness(ctx, "n1", first.Info().Incarnation, model.LivenessStopping); !errors.Is(err, meta.ErrNotOwnRecord) {
		t.Fatalf("write with the old incarnation: %v", err)
	}
	again.Leave()
	fresh, err := cluster.Join(ctx, c.Store, model.NodeInfo{ID: "n1", Address: "a"}, testTTL, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Leave()
	if got := c.State().LivenessOf("n1"); got != model.LivenessAlive {
		t.Fatalf("a new process: %s, want Alive", got)
	}
}
