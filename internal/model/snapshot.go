package model

// Revision is an etcd mod-revision. Plans fingerprint the objects they read
// by these numbers, so an unrelated write never makes a plan stale.
type Revision int64

// NodeState is one registered node as a snapshot saw it.
type NodeState struct {
	Info     NodeInfo `json:"info"`
	Liveness Liveness `json:"liveness"`
	// NodeRevision and LivenessRevision are the mod-revisions of the
	// node's registration and liveness keys.
	NodeRevision     Revision `json:"node_revision"`
	LivenessRevision Revision `json:"liveness_revision"`
	Coordinator      bool     `json:"coordinator"`
}

// Snapshot is the consistent view of the cluster that the planner reads. It
// is taken at one etcd revision.
type Snapshot struct {
	ClusterID        string                `json:"cluster_id"`
	Revision         Revision              `json:"revision"`
	Coordinator      NodeID                `json:"coordinator,omitempty"`
	CoordinatorEpoch uint64                `json:"coordinator_epoch,omitempty"`
	Nodes            []NodeState           `json:"nodes"`
	Changefeeds      []ChangefeedPlacement `json:"changefeeds"`
	Partitions       []PartitionState      `json:"partitions"`
	// Draining is the capture a drain is emptying, if any.
	Draining NodeID `json:"draining,omitempty"`
	// DrainEnded: the drain's plan ended without finishing it (it failed:
	// held past its hold timeout, say); a drain of the same capture
	// submitted again takes it over.
	DrainEnded bool `json:"drain_ended,omitempty"`
}

// ChangefeedPlacement is one changefeed as the planner sees it: its
// state, where its maintainer is, and the revision of that placement.
type ChangefeedPlacement struct {
	ID                 ChangefeedID        `json:"id"`
	State              ChangefeedState     `json:"state"`
	Maintainer         MaintainerPlacement `json:"maintainer"`
	MaintainerRevision Revision            `json:"maintainer_revision"`
}

// PartitionState is one routing-table entry and its revision.
type PartitionState struct {
	Route    RouteEntry `json:"route"`
	Revision Revision   `json:"revision"`
}

// Node returns the node with the given id.
func (s *Snapshot) Node(id NodeID) (NodeState, bool) {
	for _, n := range s.Nodes {
		if n.Info.ID == id {
			return n, true
		}
	}
	return NodeState{}, false
}

// SchedulableNodes returns the nodes that may receive new work, in snapshot order.
func (s *Snapshot) SchedulableNodes() []NodeState {
	var out []NodeState
	for _, n := range s.Nodes {
		if n.Liveness.IsSchedulable() {
			out = append(out, n)
		}
	}
	return out
}
