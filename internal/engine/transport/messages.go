package transport

import "github.com/cdcctl/cdcctl/internal/model"

// The engine's messages. They are spelled here, beside the transport, so
// that both ends of each exchange read the same definition.

// TopicHeartbeat carries a Heartbeat from a node's dispatcher manager to
// a changefeed's maintainer.
const TopicHeartbeat = "heartbeat"

// Heartbeat is one node's report, to one changefeed's maintainer, of
// every partition of that changefeed it runs or has just stopped: one
// message per maintainer per interval, whatever the number of partitions.
//
// It is always complete, never a delta: a maintainer that has just been
// placed learns the truth from the first round of heartbeats (its
// bootstrap), and a lost heartbeat is replaced by the next one.
type Heartbeat struct {
	Changefeed model.ChangefeedID `json:"changefeed"`
	// MaintainerEpoch is the placement the sender addressed; a maintainer
	// of another epoch drops the heartbeat.
	MaintainerEpoch uint64 `json:"maintainer_epoch"`
	// Partitions: each one's position under the routing-table epoch it
	// runs as; a report of an older epoch is dropped. The plain ones ride
	// in Compact instead (compact.go); Positions gives both.
	Partitions []PartitionProgress `json:"partitions"`
	Compact    string              `json:"compact,omitempty"`
	// Failed: partitions placed on the sender that it could not start
	// (seed 003's failed PreparePartition); after MaxStartFailures the
	// maintainer gives the partition back to where it came from.
	Failed []FailedStart `json:"failed,omitempty"`
	// Recover: dispatchers that failed and wait to be recovered (seed
	// 002). A request is re-sent in every heartbeat until it has a final
	// answer (R4); its identity is (ID, Epoch, MaintainerEpoch) (R9).
	Recover []RecoverRequest `json:"recover,omitempty"`
	// Restarts: changefeed restarts on the sender since its last
	// acknowledged heartbeat, for the changefeed's status.
	Restarts []Restart `json:"restarts,omitempty"`
}

// RecoverRequest asks the maintainer to recover a partition's dispatcher
// that failed under routing epoch Epoch.
type RecoverRequest struct {
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
	Err   string `json:"err"`
	// Permanent errors are not recovered: the maintainer fails the
	// changefeed with the error and Remedy.
	Permanent bool   `json:"permanent,omitempty"`
	Remedy    string `json:"remedy,omitempty"`
	// Run is the changefeed's run (model.ChangefeedStatus.Run) the
	// dispatcher failed in: a permanent error of an earlier run does not
	// fail a resumed changefeed.
	Run uint64 `json:"run,omitempty"`
}

// Restart is a changefeed restart on one node (seed 002, R10).
type Restart struct {
	Reason string `json:"reason"`
	Err    string `json:"err"`
	Time   int64  `json:"time_unix_ms"`
}

// TopicRecoverAnswer carries a RecoverAnswer from a changefeed's
// maintainer to a node's dispatcher manager.
const TopicRecoverAnswer = "recover-answer"

// RecoverState is the maintainer's answer to a recovery request (seed
// 002, R5).
type RecoverState string

const (
	// RecoverAccepted: the maintainer will re-create the dispatcher.
	RecoverAccepted RecoverState = "ACCEPTED"
	// RecoverRunning: it has: the partition runs under a newer epoch on
	// the same node.
	RecoverRunning RecoverState = "RUNNING"
	// RecoverSuperseded: something else placed the partition anew (a
	// move, a split, a pause): nothing to recover. Final.
	RecoverSuperseded RecoverState = "SUPERSEDED"
	// RecoverFailed: it cannot be recovered (a permanent error). Final.
	RecoverFailed RecoverState = "FAILED"
)

// Final says whether the state ends the request.
func (s RecoverState) Final() bool { return s == RecoverSuperseded || s == RecoverFailed }

// RecoverAnswer answers one node's requests of one changefeed. The
// receiver drops it unless it comes from the changefeed's current
// maintainer placement (R8).
type RecoverAnswer struct {
	Changefeed      model.ChangefeedID `json:"changefeed"`
	MaintainerEpoch uint64             `json:"maintainer_epoch"`
	Answers         []RecoverReply     `json:"answers"`
}

// RecoverReply is the state of one request, named by its identity.
type RecoverReply struct {
	ID     string       `json:"id"`
	Epoch  uint64       `json:"epoch"`
	State  RecoverState `json:"state"`
	Reason string       `json:"reason,omitempty"`
}

// FailedStart is a partition a node could not start under a placement.
type FailedStart struct {
	ID       string `json:"id"`
	Epoch    uint64 `json:"epoch"`
	Attempts int    `json:"attempts"`
	Err      string `json:"err"`
}

// PartitionProgress is one partition's position in a heartbeat. A Final
// position is re-sent in every heartbeat until the maintainer has
// persisted it (the sender sees that in etcd).
type PartitionProgress struct {
	ID string `json:"id"`
	model.Progress
}
