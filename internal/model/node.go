package model

import "time"

// NodeID identifies one cdc-agent process in the cluster, e.g. "capture-3".
type NodeID string

// NodeInfo is what a node registers about itself under its session lease.
// It disappears with the lease, so its presence means the process is alive.
type NodeInfo struct {
	ID        NodeID    `json:"id"`
	Address   string    `json:"address"` // advertised API address, host:port
	Hostname  string    `json:"hostname,omitempty"`
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// Incarnation is the node's lease id. A restarted process with the same
	// NodeID has a new incarnation, so records of the previous one can be
	// told apart from its own.
	Incarnation int64 `json:"incarnation"`
	// Features are the behaviours this node's version has that nodes of
	// an earlier version lack and would misread (Feature*): a new node
	// uses one only while every node of the cluster has it, so that a
	// rolling upgrade can run both versions side by side. Nodes of a
	// version before the field have none.
	Features []string `json:"features,omitempty"`
}

// Features a node's version may have (NodeInfo.Features).
const (
	// FeatureStorageNotes: the node resumes an exactly-once storage
	// sink's dispatcher after the flushes noted on its data files, not
	// only after its progress object. A flush may leave only notes while
	// every node reads them.
	FeatureStorageNotes = "storage-notes"
	// FeatureRolloutHooks: the node, as coordinator, keeps a rollout
	// plan's restart hook (restart_by) and asks a capture to exit for a
	// hook's restart; one without it drops the hook.
	FeatureRolloutHooks = "rollout-hooks"
	// FeatureKafkaHashPartitions: the node opens a Kafka sink whose URI
	// pins the partitions keys hash over (hash-partitions); one without
	// it refuses the parameter, so a create pins only while every node
	// has it.
	FeatureKafkaHashPartitions = "kafka-hash-partitions"
	// FeaturePlanFailing: the node, as coordinator, knows a plan that
	// is to fail once its running steps have ended (exec.Record's
	// failing); one without it would begin the plan's other steps and
	// never end it, so a plan waits only while every node has it.
	FeaturePlanFailing = "plan-failing"
)

// BuildFeatures are the features of this build's nodes.
var BuildFeatures = []string{FeatureStorageNotes, FeatureRolloutHooks, FeatureKafkaHashPartitions, FeaturePlanFailing}

// Has says whether the node's version has feature f.
func (n NodeInfo) Has(f string) bool {
	for _, g := range n.Features {
		if g == f {
			return true
		}
	}
	return false
}

// LivenessRecord is the persisted liveness of one node incarnation.
type LivenessRecord struct {
	State       Liveness  `json:"state"`
	Incarnation int64     `json:"incarnation"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// DrainRecord is the cluster's one drain in progress (seed 000), persisted
// so that a new coordinator continues it.
type DrainRecord struct {
	Epoch                  uint64    `json:"epoch"`
	Target                 NodeID    `json:"draining_target"`
	BatchSize              int       `json:"batch_size"`
	StartTime              time.Time `json:"start_time"`
	InitialMaintainerCount int       `json:"initial_maintainer_count"`
	InitialDispatcherCount int       `json:"initial_dispatcher_count"`
	// PlanID is the plan that runs the drain.
	PlanID string `json:"plan_id,omitempty"`
	// Hold says why nothing more may move off the target now (its plan
	// is paused, or held by its lag budget): while it is set, maintainers
	// move no partition off it and the drain does not end (Stopping
	// waits), so a held or paused drain begins nothing it cannot take
	// back.
	Hold string `json:"hold,omitempty"`
}

// RestartRequest asks one incarnation of a capture to exit gracefully so
// that its service manager starts it again (a rollout's restart step).
// It names the incarnation: the process that comes back is a new one and
// does not take the request for itself.
type RestartRequest struct {
	Node        NodeID    `json:"node"`
	Incarnation int64     `json:"incarnation"`
	PlanID      string    `json:"plan_id"`
	RequestedAt time.Time `json:"requested_at"`
	// ByHook: the rollout's hook restarts the capture (rollout upgrade
	// --exec), which does not exit by itself; the request only marks
	// the incarnation the plan waits to see replaced.
	ByHook bool `json:"by_hook,omitempty"`
}
