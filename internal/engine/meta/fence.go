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
type Fence struct {
	Key            string `json:"key"`
	CreateRevision int64  `json:"create_revision"`
}

// Epoch is the term's number: create revisions only grow, so a later term
// always has a larger epoch.
func (f Fence) Epoch() uint64 { return uint64(f.CreateRevision) }

func (f Fence) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.CreateRevision)
}

func (f Fence) String() string { return fmt.Sprintf("%s@%d", f.Key, f.CreateRevision) }

func (f Fence) valid() bool { return f.Key != "" && f.CreateRevision > 0 }
