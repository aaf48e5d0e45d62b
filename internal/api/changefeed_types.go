package api

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ChangefeedCreateRequest is the body of POST /api/v2/changefeeds.
type ChangefeedCreateRequest struct {
	ID                 string `json:"id"`
	Source             string `json:"source"`
	Sink               string `json:"sink"`
	PartitionsPerTable int    `json:"partitions_per_table,omitempty"`
}

// Changefeed is one changefeed as operators see it.
type Changefeed struct {
	ID                 string    `json:"id"`
	State              string    `json:"state"`
	CheckpointTs       uint64    `json:"checkpoint_ts"`
	CheckpointLagMs    int64     `json:"checkpoint_lag_ms"`
	Maintainer         string    `json:"maintainer"`
	MaintainerEpoch    uint64    `json:"maintainer_epoch"`
	Partitions         int       `json:"partitions"`
	Source             string    `json:"source"`
	Sink               string    `json:"sink"`
	PartitionsPerTable int       `json:"partitions_per_table"`
	StartTs            uint64    `json:"start_ts"`
	CreatedAt          time.Time `json:"created_at"`
}

// ChangefeedList is GET /api/v2/changefeeds.
type ChangefeedList struct {
	Version     int          `json:"version"`
	Changefeeds []Changefeed `json:"changefeeds"`
}

// ChangefeedResponse is one changefeed.
type ChangefeedResponse struct {
	Version int `json:"version"`
	Changefeed
}

// Partition is one entry of the routing table.
type Partition struct {
	ID           string `json:"id"`
	Changefeed   string `json:"changefeed"`
	Table        string `json:"table"`
	Start        string `json:"start"`
	End          string `json:"end"`
	Node         string `json:"node"`
	Status       string `json:"status"`
	Epoch        uint64 `json:"epoch"`
	CheckpointTs uint64 `json:"checkpoint_ts"`
	// Target and SplitKey: what a Draining (busy) partition is doing,
	// since BusySince.
	Target    string     `json:"target,omitempty"`
	SplitKey  string     `json:"split_key,omitempty"`
	BusySince *time.Time `json:"busy_since,omitempty"`
	// Pinned: an operator placed it; the balance scheduler leaves it.
	Pinned bool `json:"pinned,omitempty"`
}

// PartitionResponse is GET /api/v2/partitions/{id}: one partition and
// its recent history (splits, moves), oldest first.
type PartitionResponse struct {
	Version int `json:"version"`
	Partition
	History []model.PartitionEvent `json:"history"`
}

// PartitionList is GET /api/v2/partitions.
type PartitionList struct {
	Version    int         `json:"version"`
	Partitions []Partition `json:"partitions"`
}
