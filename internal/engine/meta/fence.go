package meta

import (
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrFenced means a coordinator write was refused because the writer no
// longer holds the term it was elected with. Nothing of the write landed.
var ErrFenced = errors.New("write refused: this node is no longer the coordinator (its election term ended)")

// Fence is the proof of a coordinator term: a key that exists exactly as
// long as the term lasts, and the create revision it had when the term
// began. Every coordinator write compares it in the same transaction, so a
// deposed coordinator that wakes up late cannot write anything.
//
// Any election backend can produce one: the etcd backend uses its election
// key; a backend outside etcd writes an epoch key when it wins.
//
// The fence also pins the coordinator's own liveness record as it was when
// the term began (Alive): a coordinator whose liveness moved on (Stopping,
// or Draining by mistake) is no longer allowed to write, even before its
// own view notices.
type Fence struct {
	Key            string `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	// ModRevision, when set, is what the fence compares instead: the term
	// key of a backend outside etcd is written (not created) by each new
	// leader, and its mod-revision changes with every new term.
	ModRevision int64 `json:"mod_revision,omitempty"`
	// LivenessKey and LivenessRevision are the leader's liveness record
	// and its mod-revision at the start of the term; empty for fences
	// made without one (tests of the election alone).
	LivenessKey      string `json:"liveness_key,omitempty"`
	LivenessRevision int64  `json:"liveness_revision,omitempty"`
}

// Epoch is the term's number: create and mod revisions only grow, so a
// later term always has a larger epoch, whichever backend elected it.
func (f Fence) Epoch() uint64 {
	if f.ModRevision != 0 {
		return uint64(f.ModRevision)
	}
	return uint64(f.CreateRevision)
}

// cmps are the comparisons a write under the fence makes. A fence with no
// revision holds nothing: compared as it is (create revision 0) it would
// hold exactly when the term key is absent, that is when no coordinator
// holds the term.
func (f Fence) cmps() []clientv3.Cmp {
	if !f.valid() {
		return []clientv3.Cmp{never(f.Key)}
	}
	c := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.CreateRevision)}
	if f.ModRevision != 0 {
		c = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(f.Key), "=", f.ModRevision)}
	}
	if f.LivenessKey != "" {
		c = append(c, clientv3.Compare(clientv3.ModRevision(f.LivenessKey), "=", f.LivenessRevision))
	}
	return c
}

func (f Fence) String() string { return fmt.Sprintf("%s@%d", f.Key, f.Epoch()) }

// holds tells whether the term key, as read, is still this fence's.
func (f Fence) holds(createRevision, modRevision int64) bool {
	if f.ModRevision != 0 {
		return modRevision == f.ModRevision
	}
	return createRevision == f.CreateRevision
}

// never is a comparison that no key's state satisfies (revisions are
// never negative).
func never(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", -1)
}

func (f Fence) valid() bool { return f.Key != "" && (f.CreateRevision > 0 || f.ModRevision > 0) }
