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
	// runs as; a report of an older epoch is dropped.
	Partitions []PartitionProgress `json:"partitions"`
	// Failed: partitions placed on the sender that it could not start
	// (seed 003's failed PreparePartition); after MaxStartFailures the
	// maintainer gives the partition back to where it came from.
	Failed []FailedStart `json:"failed,omitempty"`
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
