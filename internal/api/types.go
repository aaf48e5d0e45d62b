package api

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// SchemaVersion is the version field of every JSON document below. It
// changes only when a field is removed or changes meaning; new fields may
// appear without a bump.
const SchemaVersion = 1

// Capture is one node as operators see it.
type Capture struct {
	ID           string    `json:"id"`
	Address      string    `json:"address"`
	Liveness     string    `json:"liveness"`
	Coordinator  bool      `json:"coordinator"`
	PID          int       `json:"pid"`
	StartedAt    time.Time `json:"started_at"`
	AgentVersion string    `json:"agent_version"`
	// Features are the agent's version's features that older versions
	// lack (model.NodeInfo.Features; docs/deploy.md "Versions side by
	// side"); none for a version before them.
	Features []string `json:"features,omitempty"`
}

// CaptureList is GET /api/v2/captures.
type CaptureList struct {
	Version  int       `json:"version"`
	Captures []Capture `json:"captures"`
}

// CaptureResponse is GET /api/v2/captures/{id}.
type CaptureResponse struct {
	Version int `json:"version"`
	Capture
}

// Status is GET /api/v2/status.
type Status struct {
	Version            int    `json:"version"`
	ClusterID          string `json:"cluster_id"`
	Coordinator        string `json:"coordinator"`
	CoordinatorEpoch   uint64 `json:"coordinator_epoch"`
	CoordinatorAddress string `json:"coordinator_address,omitempty"`
	// Election is the election backend of the capture that answered:
	// etcd, or mysql with the lock's epoch (ElectionEpoch).
	Election      string `json:"election"`
	ElectionEpoch uint64 `json:"election_epoch,omitempty"`
	Captures      int    `json:"captures"`
	Alive         int    `json:"alive"`
	Draining      int    `json:"draining"`
	Stopping      int    `json:"stopping"`
	// ServedBy is the capture that answered, so an operator knows which
	// of the --server addresses was used.
	ServedBy      string `json:"served_by"`
	ServerVersion string `json:"server_version"`
	Revision      int64  `json:"revision"`
}

// ResignRequest is the optional body of POST /api/v2/coordinator/resign.
type ResignRequest struct {
	// Wait is how long to wait for another capture to take over, as a Go
	// duration ("10s"). Default 15s.
	Wait string `json:"wait,omitempty"`
}

// ResignResponse says who led before and who leads now.
type ResignResponse struct {
	Version          int    `json:"version"`
	Previous         string `json:"previous"`
	PreviousEpoch    uint64 `json:"previous_epoch"`
	Coordinator      string `json:"coordinator"`
	CoordinatorEpoch uint64 `json:"coordinator_epoch"`
}

// SnapshotResponse is GET /api/v2/snapshot: what the planner reads.
type SnapshotResponse struct {
	Version  int            `json:"version"`
	Snapshot model.Snapshot `json:"snapshot"`
}
