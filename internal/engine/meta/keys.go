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

// Keys is the layout under /cdcctl/<cluster-id>/, and partition states
// under /cdcctl-checkpoints/<cluster-id>/: outside the root, so that the
// nodes' watched view never loads them.
type Keys struct{ root, checkpoints string }

// NewKeys returns the layout for one cluster.
func NewKeys(clusterID string) Keys {
	return Keys{root: "/cdcctl/" + clusterID + "/", checkpoints: "/cdcctl-checkpoints/" + clusterID + "/"}
}

// Checkpoint is a partition's state in the etcd CheckpointStore.
func (k Keys) Checkpoint(cf model.ChangefeedID, pid string) string {
	return k.checkpoints + string(cf) + "/" + pid
}

func (k Keys) Root() string                    { return k.root }
func (k Keys) NodesPrefix() string             { return k.root + "nodes/" }
func (k Keys) Node(id model.NodeID) string     { return k.NodesPrefix() + string(id) }
func (k Keys) LivenessPrefix() string          { return k.root + "liveness/" }
func (k Keys) Liveness(id model.NodeID) string { return k.LivenessPrefix() + string(id) }

// ElectionPrefix is where the etcd election backend keeps one key per
// campaigning node; the key with the lowest create revision leads.
func (k Keys) ElectionPrefix() string { return k.root + "election/" }

// ElectionTerm is the term key of an election backend outside etcd (the
// MySQL lock): it holds the leader's id, on the leader's lease, and its
// mod-revision is the term's fence. ElectionTermMax holds the highest
// backend epoch ever raised there, so that a leader of an older epoch
// can never raise the term again.
func (k Keys) ElectionTerm() string    { return k.root + "term" }
func (k Keys) ElectionTermMax() string { return k.root + "term-max" }

// Changefeed keys: info (config), status (state, checkpoint) and
// maintainer (placement), under changefeeds/<cf>/.
func (k Keys) ChangefeedsPrefix() string { return k.root + "changefeeds/" }
func (k Keys) ChangefeedPrefix(cf model.ChangefeedID) string {
	return k.ChangefeedsPrefix() + string(cf) + "/"
}
func (k Keys) ChangefeedInfo(cf model.ChangefeedID) string { return k.ChangefeedPrefix(cf) + "info" }
func (k Keys) ChangefeedStatus(cf model.ChangefeedID) string {
	return k.ChangefeedPrefix(cf) + "status"
}
func (k Keys) Maintainer(cf model.ChangefeedID) string { return k.ChangefeedPrefix(cf) + "maintainer" }

// ChangefeedProgress is the maintainer's record of every partition's
// position (written with the checkpoint; in shards since progress.go,
// this one key before), apart
// from the routing table so that progress never makes a plan that read
// the routing table stale.
func (k Keys) ChangefeedProgress(cf model.ChangefeedID) string {
	return k.ChangefeedPrefix(cf) + "progress"
}

// ChangefeedProgressShard is one shard of the positions (progress.go).
func (k Keys) ChangefeedProgressShard(cf model.ChangefeedID, shard string) string {
	return k.ChangefeedPrefix(cf) + "progress/" + shard
}

// Partition keys: the routing table, partitions/<cf>/<pid>.
func (k Keys) PartitionsPrefix() string { return k.root + "partitions/" }
func (k Keys) Partitions(cf model.ChangefeedID) string {
	return k.PartitionsPrefix() + string(cf) + "/"
}
func (k Keys) Partition(cf model.ChangefeedID, pid string) string { return k.Partitions(cf) + pid }

// Plan keys: an executed plan's record, plans/<id>, written by the
// coordinator only; an operator's request for it (pause, resume, cancel),
// plan-requests/<id>, so that a request never races the record's writer.
func (k Keys) PlansPrefix() string          { return k.root + "plans/" }
func (k Keys) Plan(id string) string        { return k.PlansPrefix() + id }
func (k Keys) PlanRequestsPrefix() string   { return k.root + "plan-requests/" }
func (k Keys) PlanRequest(id string) string { return k.PlanRequestsPrefix() + id }

// Barrier keys: one DDL barrier per table, barriers/<cf>/<table>.
func (k Keys) BarriersPrefix() string { return k.root + "barriers/" }
func (k Keys) Barrier(cf model.ChangefeedID, table string) string {
	return k.BarriersPrefix() + string(cf) + "/" + table
}

// PartitionIDs is the counter behind p<N>.
func (k Keys) PartitionIDs() string { return k.root + "ids/partition" }

// Drain holds the cluster's single DrainRecord (seed 000).
func (k Keys) Drain() string { return k.root + "drain" }

// CleanupsPrefix holds the sources removed changefeeds left to release
// (model.SourceCleanup), by changefeed.
func (k Keys) CleanupsPrefix() string               { return k.root + "cleanups/" }
func (k Keys) Cleanup(cf model.ChangefeedID) string { return k.CleanupsPrefix() + string(cf) }

// RestartsPrefix holds the restart requests of a rollout
// (model.RestartRequest), by capture: restarts/<node>.
func (k Keys) RestartsPrefix() string         { return k.root + "restarts/" }
func (k Keys) Restart(id model.NodeID) string { return k.RestartsPrefix() + string(id) }

type keyKind int

const (
	kindOther keyKind = iota
	kindNode
	kindLiveness
	kindElection
	kindChangefeed
	kindPartition
	kindBarrier
	kindDrain
	kindPlan
	kindPlanRequest
	kindCleanup
	kindRestart
	kindTerm
	kindTermMax
)

// classify tells which object a key under the root is.
func (k Keys) classify(key string) (keyKind, string) {
	if key == k.Drain() {
		return kindDrain, "drain"
	}
	if key == k.ElectionTerm() {
		return kindTerm, "term"
	}
	if key == k.ElectionTermMax() {
		return kindTermMax, "term-max"
	}
	for _, c := range []struct {
		prefix string
		kind   keyKind
	}{
		{k.NodesPrefix(), kindNode},
		{k.LivenessPrefix(), kindLiveness},
		{k.ElectionPrefix(), kindElection},
		{k.ChangefeedsPrefix(), kindChangefeed},
		{k.PartitionsPrefix(), kindPartition},
		{k.BarriersPrefix(), kindBarrier},
		{k.PlansPrefix(), kindPlan},
		{k.PlanRequestsPrefix(), kindPlanRequest},
		{k.CleanupsPrefix(), kindCleanup},
		{k.RestartsPrefix(), kindRestart},
	} {
		if rest, ok := strings.CutPrefix(key, c.prefix); ok && rest != "" {
			return c.kind, rest
		}
	}
	return kindOther, ""
}
