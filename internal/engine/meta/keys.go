// Package meta owns the etcd key layout of a cluster and the typed, fenced
// reads and writes over it. It is the only package that spells etcd keys;
// everything else asks it.
//
// It imports model and the etcd client, and must never import other engine
// packages, api or cli.
package meta

import (
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Keys is the layout under /cdcctl/<cluster-id>/.
type Keys struct{ root string }

// NewKeys returns the layout for one cluster.
func NewKeys(clusterID string) Keys { return Keys{root: "/cdcctl/" + clusterID + "/"} }

func (k Keys) Root() string                    { return k.root }
func (k Keys) NodesPrefix() string             { return k.root + "nodes/" }
func (k Keys) Node(id model.NodeID) string     { return k.NodesPrefix() + string(id) }
func (k Keys) LivenessPrefix() string          { return k.root + "liveness/" }
func (k Keys) Liveness(id model.NodeID) string { return k.LivenessPrefix() + string(id) }

// ElectionPrefix is where the etcd election backend keeps one key per
// campaigning node; the key with the lowest create revision leads.
func (k Keys) ElectionPrefix() string { return k.root + "election/" }

// Drain holds the cluster's single DrainRecord (seed 000).
func (k Keys) Drain() string { return k.root + "drain" }

type keyKind int

const (
	kindOther keyKind = iota
	kindNode
	kindLiveness
	kindElection
)

// classify tells which object a key under the root is.
func (k Keys) classify(key string) (keyKind, string) {
	for _, c := range []struct {
		prefix string
		kind   keyKind
	}{
		{k.NodesPrefix(), kindNode},
		{k.LivenessPrefix(), kindLiveness},
		{k.ElectionPrefix(), kindElection},
	} {
		if rest, ok := strings.CutPrefix(key, c.prefix); ok && rest != "" {
			return c.kind, rest
		}
	}
	return kindOther, ""
}
