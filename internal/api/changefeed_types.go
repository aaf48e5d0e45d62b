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
	// DryRun checks the request and says what the changefeed would
	// replicate (ChangefeedPreview), creating nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// ChangefeedPreview answers a create with dry_run: the tables the
// changefeed would replicate, and those it refuses, each with why.
type ChangefeedPreview struct {
	Version    int      `json:"version"`
	Changefeed string   `json:"changefeed"`
	DryRun     bool     `json:"dry_run"`
	Tables     []string `json:"tables"`
	Refused    []string `json:"refused,omitempty"`
}

// ResumeRequest is the optional body of POST .../resume: the held tables
// to read again; without it, all of them.
type ResumeRequest struct {
	Tables []string `json:"tables,omitempty"`
}

// ChangefeedUpdateRequest is the body of PATCH /api/v2/changefeeds/{id}:
// the tables the paused changefeed replicates from now on, or its new
// table rules (patterns: public.*, !public.audit).
type ChangefeedUpdateRequest struct {
	Tables []string `json:"tables,omitempty"`
	// SinkOptions change the sink URI's parameters ("" for the default);
	// only those a sink can change on a paused changefeed (how it writes:
	// sizes, timeouts, credentials), never where nor in which form.
	SinkOptions map[string]string `json:"sink_options,omitempty"`
	// CopyAgain are tables the changefeed keeps that it copies again
	// from its checkpoint (their partitions replaced by new ones cut on
	// their key now, truncated in the sink first): a table whose copy
	// went wrong, or held for a change a new copy undoes.
	CopyAgain []string `json:"copy_again,omitempty"`
	// Source is a source URI whose connection the changefeed takes: its
	// user, password, address and driver parameters (sslmode, ...);
	// what it replicates (the database, tables, slot, snapshot) stays.
	// A password given as xxxxx keeps the changefeed's. Not with Tables
	// or CopyAgain.
	Source string `json:"source,omitempty"`
	// DryRun checks and computes the change and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// ResnapshotRequest asks for a failed or paused changefeed's tables to
// be copied again (POST /api/v2/changefeeds/{id}/resnapshot).
type ResnapshotRequest struct {
	// DryRun checks and computes the re-snapshot and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// ChangefeedUpdateResponse says what an update or a re-snapshot did, or
// would do.
type ChangefeedUpdateResponse struct {
	Version    int    `json:"version"`
	Changefeed string `json:"changefeed"`
	DryRun     bool   `json:"dry_run,omitempty"`
	// Resnapshot: every table is copied again (Added), each partition
	// replaced by one over the same range (AddedPartitions) beginning at
	// At; the changefeed is left paused.
	Resnapshot bool     `json:"resnapshot,omitempty"`
	Tables     []string `json:"tables"`
	// Rules are the table rules after the update (tables= with patterns).
	Rules   []string `json:"rules,omitempty"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	// CopiedAgain are the tables kept and copied again.
	CopiedAgain []string `json:"copied_again,omitempty"`
	// AddedPartitions are the added tables' partitions (no ids in a dry
	// run); RemovedPartitions, the ids of the removed tables'.
	AddedPartitions   []Partition `json:"added_partitions,omitempty"`
	RemovedPartitions []string    `json:"removed_partitions,omitempty"`
	// At is the changefeed's checkpoint, where the added tables begin.
	At uint64 `json:"at"`
	// Sink is the sink URI after the update (secrets masked);
	// SinkChanges, one line per option changed.
	Sink        string   `json:"sink,omitempty"`
	SinkChanges []string `json:"sink_changes,omitempty"`
	// Source is the source URI after the update (secrets masked);
	// SourceChanges, one line per part of its connection changed.
	Source        string   `json:"source,omitempty"`
	SourceChanges []string `json:"source_changes,omitempty"`
	// Rekeyed: a re-snapshot's tables whose primary key changed since
	// their partitions were cut; they are copied under the key as it is.
	Rekeyed []RekeyedTable `json:"rekeyed,omitempty"`
	// Unpublished are the relations the changefeed's own publication
	// (PostgreSQL) is to lose once the update is stored (if the agent
	// cannot take them out then, the next update does): the removed
	// tables, and any other it names that is not one of the changefeed's
	// tables.
	Unpublished []string `json:"unpublished,omitempty"`
}

// RekeyedTable is a table copied again under a changed primary key: its
// key's columns when its partitions were cut (empty when not kept) and
// now; Recut, its key ranges were cut anew (the key no longer encodes as
// their bounds: other types, or another number of columns).
type RekeyedTable struct {
	Table string `json:"table"`
	From  string `json:"from,omitempty"`
	To    string `json:"to"`
	Recut bool   `json:"recut,omitempty"`
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
	// CreatedBy is the user whose token created it, when the agents
	// check tokens.
	CreatedBy string `json:"created_by,omitempty"`
	// Error says why the changefeed does not advance, e.g. its source is
	// unreachable and being retried; empty when it does.
	Error string `json:"error,omitempty"`
	// TableIssues are its tables that do not replicate as they should:
	// held (their partitions stop, the other tables advance) or dropped
	// upstream, each with what to do.
	TableIssues []model.TableIssue `json:"table_issues,omitempty"`
	// Refollow is the change of its tables that the coordinator is
	// making by itself while it has it paused (its table rules
	// followed, a held table's remedy); it resumes it once done.
	Refollow *model.Refollow `json:"refollow,omitempty"`
}

// ChangefeedList is GET /api/v2/changefeeds.
type ChangefeedList struct {
	Version     int          `json:"version"`
	Changefeeds []Changefeed `json:"changefeeds"`
	// PendingCleanups are removed changefeeds whose replication slot and
	// publication are not dropped yet (the database was unreachable; the
	// coordinator retries).
	PendingCleanups []PendingCleanup `json:"pending_cleanups,omitempty"`
}

// PendingCleanup is a removed changefeed's source not released yet.
type PendingCleanup struct {
	Changefeed string    `json:"changefeed"`
	Source     string    `json:"source"` // redacted
	Since      time.Time `json:"since"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"last_error,omitempty"`
	// Create: the record of a create that has not finished (running, or
	// cut short with its source pinned), not of a removal.
	Create bool `json:"create,omitempty"`
}

// ChangefeedResponse is one changefeed.
type ChangefeedResponse struct {
	Version int `json:"version"`
	Changefeed
	// SourceStatus is the upstream's side of a database changefeed.
	SourceStatus *SourceStatus `json:"source_status,omitempty"`
	// Incidents are its recent dispatcher recoveries, restarts and
	// failures, oldest first, with their errors.
	Incidents []model.Incident `json:"incidents,omitempty"`
}

// SourceStatus is what the upstream says of a changefeed: its slot and
// the log it retains, or why it could not be asked.
type SourceStatus struct {
	Kind string `json:"kind,omitempty"`
	// Slot is the replication slot (PostgreSQL); Active whether a reader
	// streams from it now.
	Slot   string `json:"slot,omitempty"`
	Active bool   `json:"active"`
	// Position is the upstream position confirmed as stored downstream.
	Position string `json:"position,omitempty"`
	// RetainedBytes is the upstream log kept for the changefeed
	// (PostgreSQL: WAL the slot holds back).
	RetainedBytes int64 `json:"retained_bytes"`
	// SafeBytes is how much more log may be written before the upstream
	// gives up what the changefeed needs (PostgreSQL's safe_wal_size
	// under max_slot_wal_keep_size); absent when unbounded. WALStatus is
	// the slot's wal_status: reserved, extended, unreserved or lost.
	SafeBytes *int64 `json:"safe_bytes,omitempty"`
	WALStatus string `json:"wal_status,omitempty"`
	// RetentionSeconds is how long the upstream keeps its log whatever
	// the changefeed needs (MySQL's binary log expiry); 0 when not
	// bounded by time.
	RetentionSeconds int64 `json:"retention_seconds,omitempty"`
	// Purged: the upstream no longer holds Position (MySQL: its binary
	// log file was purged); the changefeed cannot resume from it.
	Purged bool `json:"purged,omitempty"`
	// Snapshot is the initial snapshot's progress: "copying … ", "done".
	Snapshot string `json:"snapshot,omitempty"`
	// Filter is the changefeed's table rules (tables= with patterns);
	// Unreplicated, the tables they match that it does not replicate (yet),
	// each with why.
	Filter       string   `json:"filter,omitempty"`
	Unreplicated []string `json:"unreplicated,omitempty"`
	// Warnings are what the upstream does to replicated tables that the
	// changefeed cannot carry (MySQL: a foreign key's cascade), each with
	// what to do.
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
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
	// Snapshot is how far the partition's share of a database source's
	// initial snapshot is, as of its checkpoint ("done (N rows)",
	// "copied up to key K (N rows)", and ", copying through key H" where
	// the copy stops before the range's end: rows keyed after H were
	// written after it began); empty before it copied anything, and for
	// sources without one.
	Snapshot string `json:"snapshot,omitempty"`
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

// RemoveResponse answers DELETE /api/v2/changefeeds/{id}: the changefeed
// is removed; a database source's replication slot and publication are
// dropped too, or, when the database cannot be reached, CleanupPending
// says so and why, and the coordinator retries until they are dropped.
type RemoveResponse struct {
	Version        int    `json:"version"`
	Removed        string `json:"removed"`
	CleanupPending bool   `json:"cleanup_pending,omitempty"`
	CleanupError   string `json:"cleanup_error,omitempty"`
}
