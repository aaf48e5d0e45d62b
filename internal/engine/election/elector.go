// Package election decides which node is the coordinator. Elector is the
// backend-neutral contract (etcd's election, or a MySQL lock row in
// mysql.go); Runner is
// the loop every node runs: campaign only while its persisted liveness
// allows it, lead until the term ends, step down when liveness leaves Alive.
//
// It imports model, engine/meta and engine/cluster; it must never import
// coordinator, api or cli.
package election

import (
	"context"
	"errors"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrNotLeader is returned by Resign when this node holds no term.
var ErrNotLeader = errors.New("this node is not the coordinator")

// Term is one won election.
type Term struct {
	Leader model.NodeID
	// Fence guards every write the coordinator makes during the term; its
	// epoch grows with every new term.
	Fence meta.Fence
	// Done is closed when the term ends: lease lost, key removed, or Resign.
	Done <-chan struct{}
	// stepDown, set by the runner, ends the term from inside it (a
	// pointer, so that terms still compare).
	stepDown *stepDown
}

type stepDown struct {
	once sync.Once
	ch   chan struct{}
}

// StepDown ends the term from within the coordinator's own work (a
// rollout restarting this capture): it returns at once, the runner
// resigns once the lead function has returned. Without a runner (a term
// made by a test) it does nothing.
func (t Term) StepDown() {
	if t.stepDown != nil {
		t.stepDown.once.Do(func() { close(t.stepDown.ch) })
	}
}

// Epoch is the term's number.
func (t Term) Epoch() uint64 { return t.Fence.Epoch() }

// Elector campaigns for one node.
type Elector interface {
	// Campaign blocks until this node leads or ctx ends.
	Campaign(ctx context.Context) (Term, error)
	// Resign ends the current term so another candidate can win.
	Resign(ctx context.Context) error
	// Withdraw removes any trace of this node's candidacy. A campaign that
	// failed half-way may leave one, and a node that may not campaign must
	// not stand in the queue.
	Withdraw(ctx context.Context) error
}
