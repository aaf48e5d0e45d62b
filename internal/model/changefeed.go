package model

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ChangefeedID names a changefeed, e.g. "demo".
type ChangefeedID string

var changefeedIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidateChangefeedID says what is wrong with a name, if anything.
func ValidateChangefeedID(id string) error {
	if !changefeedIDPattern.MatchString(id) {
		return fmt.Errorf("changefeed name %q is not valid: use 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit", id)
	}
	return nil
}

// ChangefeedInfo is a changefeed's configuration; it does not change
// while the changefeed runs (changefeed update changes its tables while
// it is paused).
type ChangefeedInfo struct {
	ID        ChangefeedID `json:"id"`
	SourceURI string       `json:"source"` // with its start pinned
	SinkURI   string       `json:"sink"`
	// PartitionsPerTable is how many key ranges each table is cut into at
	// creation.
	PartitionsPerTable int       `json:"partitions_per_table"`
	StartTs            Ts        `json:"start_ts"`
	CreatedAt          time.Time `json:"created_at"`
	// CreatedBy is the user whose token created it (agents that check
	// tokens).
	CreatedBy string `json:"created_by,omitempty"`
	// UpdatedAt is when its tables last changed (changefeed update); the
	// nodes open its source again.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// TransactionMetaOption is the sink URI parameter that asks for source
// transactions' boundaries (transaction-meta=true; docs/transactions.md).
// The changefeed's event log numbers its rows within their transactions
// only then, so both the sink and the log's owner read it.
const TransactionMetaOption = "transaction-meta"

// WantsTransactions says the changefeed's sink asks for transaction
// boundaries.
func (i ChangefeedInfo) WantsTransactions() bool {
	u, err := url.Parse(i.SinkURI)
	if err != nil {
		return false
	}
	v, err := strconv.ParseBool(u.Query().Get(TransactionMetaOption))
	return err == nil && v
}

// SameIncarnation says whether two infos describe the changefeed as it
// was opened: created together and not updated since.
func (i ChangefeedInfo) SameIncarnation(o ChangefeedInfo) bool {
	return i.ID == o.ID && i.CreatedAt.Equal(o.CreatedAt) && i.UpdatedAt.Equal(o.UpdatedAt)
}

// ChangefeedState is a changefeed's lifecycle state.
type ChangefeedState string

const (
	ChangefeedNormal ChangefeedState = "normal"
	ChangefeedPaused ChangefeedState = "paused"
	ChangefeedFailed ChangefeedState = "failed"
	// ChangefeedWarning is how a normal changefeed that does not advance
	// is shown (its Error says why: a source that cannot be read, a sink
	// that keeps failing); it is never stored, and it clears itself with
	// the next checkpoint advance. TiCDC's "warning" state.
	ChangefeedWarning ChangefeedState = "warning"
)

// Shown is the state operators see: Warning for a normal changefeed with
// an error.
func (s ChangefeedStatus) Shown() ChangefeedState {
	if s.State == ChangefeedNormal && (s.Error != "" || len(s.Tables) > 0) {
		return ChangefeedWarning
	}
	return s.State
}

// ChangefeedStatus is what the cluster reports about a changefeed.
type ChangefeedStatus struct {
	State        ChangefeedState `json:"state"`
	CheckpointTs Ts              `json:"checkpoint_ts"`
	Error        string          `json:"error,omitempty"`
	// SourcePosition is where a database source's reader resumes: a
	// point at or below the checkpoint, written with it. It is the
	// source's own encoding.
	SourcePosition json.RawMessage `json:"source_position,omitempty"`
	// Run counts the times the changefeed was resumed: a recovery request
	// made before a resume must not fail the resumed changefeed.
	Run uint64 `json:"run,omitempty"`
	// Incidents are the changefeed's recent recoveries and restarts,
	// oldest first (at most MaxIncidents).
	Incidents []Incident `json:"incidents,omitempty"`
	// Tables are the tables that do not replicate as they should (held,
	// dropped upstream), as the changefeed's reader last reported them.
	Tables []TableIssue `json:"tables,omitempty"`
	// Refollow is a change of the changefeed's tables that the
	// coordinator makes by itself in one pause (its table rules followed,
	// a held table's remedy): written with the pause, advanced with each
	// update, cleared by the resume. A coordinator that stops in between
	// leaves it here for the next, which makes the rest and resumes the
	// changefeed: before, the changefeed stayed paused, or a table
	// removed to be copied again stayed out of it.
	Refollow *Refollow `json:"refollow,omitempty"`
}

// Refollow is a change of a changefeed's tables the coordinator makes by
// itself while the changefeed is paused.
type Refollow struct {
	// By names why (the pause's and the resume's incidents say it).
	By string `json:"by"`
	// Steps are the changefeed's tables after each update, in turn (a
	// table copied again: first without it, then with it back).
	Steps [][]string `json:"steps"`
	// Again are tables copied again with the last step (kept, their
	// partitions replaced by new ones that copy them).
	Again []string `json:"again,omitempty"`
	// Done counts the steps already written.
	Done  int       `json:"done,omitempty"`
	Since time.Time `json:"since"`
	// Run is the changefeed's run (ChangefeedStatus.Run) when it was
	// paused for the change: a resume since moves it (nil in a record
	// written before records kept it).
	Run *uint64 `json:"run,omitempty"`
	// TakenOver names who took the change over while it was made (an
	// operator's update or re-snapshot): the coordinator makes no more of
	// it. The resume clears the record.
	TakenOver string `json:"taken_over,omitempty"`
}

// Active says a change of the changefeed's tables is the coordinator's
// to make (a record, not taken over).
func (r *Refollow) Active() bool { return r != nil && r.TakenOver == "" }

// TakeOver is the record after an update or re-snapshot by, which takes
// the coordinator's change over (nil without one).
func (r *Refollow) TakeOver(by string) *Refollow {
	if r == nil {
		return nil
	}
	t := *r
	if t.TakenOver = by; by == "" {
		t.TakenOver = "an operator"
	}
	return &t
}

// TableIssue is a table of a changefeed that does not replicate as it
// should, as its reader found: held (it cannot go on; its partitions stop
// below At while the other tables advance) or dropped upstream (nothing
// more of it comes).
type TableIssue struct {
	Table string `json:"table"`
	// State is TableHeld or TableDropped.
	State string `json:"state"`
	At    Ts     `json:"at,omitempty"`
	// Since is when the reader found it.
	Since time.Time `json:"since"`
	// Reason says what happened and what to do.
	Reason string `json:"reason"`
	// RenamedTo is the name a held table was renamed to upstream, where
	// no other table has taken its name: a changefeed of tables named one
	// by one follows it there by itself, as one with table rules does
	// (the coordinator).
	RenamedTo string `json:"renamed_to,omitempty"`
	// CopyAgain says the table is held for a change its copy undoes (its
	// key changed, rows came in that the log does not carry): such a
	// changefeed copies it again by itself (new partitions, as if it were
	// removed and added back).
	CopyAgain bool `json:"copy_again,omitempty"`
	// End says a table dropped upstream is ended by the changefeed
	// itself (auto-remedy, tables named one by one): removed from its
	// tables once its partitions passed At (after the drop), the sink
	// told DROP TABLE; with CopyAgain too, a table created again under
	// its name by then is copied in its place instead (not with
	// snapshot=never: nothing would copy it).
	End bool `json:"end,omitempty"`
}

// Line is the issue on one line, as 'changefeed get' and a refused
// verify show it.
func (ti TableIssue) Line() string {
	if ti.State == TableHeld {
		return fmt.Sprintf("%s HELD at %s (since %s): %s", ti.Table, ti.At.Time().UTC().Format("15:04:05.000"), ti.Since.UTC().Format(time.RFC3339), ti.Reason)
	}
	return fmt.Sprintf("%s %s (found %s): %s", ti.Table, strings.ToUpper(ti.State), ti.Since.UTC().Format(time.RFC3339), ti.Reason)
}

// Table issue states.
const (
	TableHeld    = "held"
	TableDropped = "dropped"
)

// SameIssues says whether two reports say the same (when each was found
// aside).
func SameIssues(a, b []TableIssue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Table != y.Table || x.State != y.State || x.At != y.At || x.Reason != y.Reason {
			return false
		}
	}
	return true
}

// Incident is a recovery or a restart of a changefeed (seed 002).
type Incident struct {
	Time time.Time `json:"time"`
	// Kind: recovered (a dispatcher re-created after its sink failed),
	// restart (the changefeed restarted on a node; Reason says why),
	// failed (a permanent error), excluded (a capture that could not start
	// the changefeed's partitions, kept out of its placements for a while),
	// maintainer-failed (the changefeed's maintainer could not start on
	// Node under placement Epoch: it is placed elsewhere).
	Kind      string `json:"kind"`
	Partition string `json:"partition,omitempty"`
	Node      NodeID `json:"node,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Err       string `json:"err,omitempty"`
}

// IncidentMaintainerFailed is the kind of incident a maintainer records
// when it cannot start on its node.
const IncidentMaintainerFailed = "maintainer-failed"

// MaxIncidents bounds a changefeed's incidents.
const MaxIncidents = 8

// MaxPartitionsPerTable bounds the routing table of one table: the
// coordinator refuses more, and cdcctl says so before asking.
const MaxPartitionsPerTable = 64

// Record appends incidents, keeping the newest MaxIncidents.
func (s *ChangefeedStatus) Record(in ...Incident) {
	h := append(append([]Incident(nil), s.Incidents...), in...)
	if len(h) > MaxIncidents {
		h = h[len(h)-MaxIncidents:]
	}
	s.Incidents = h
}

// MaintainerPlacement says which node runs a changefeed's maintainer.
// The coordinator writes it; the epoch grows with every placement.
type MaintainerPlacement struct {
	Node  NodeID `json:"node"`
	Epoch uint64 `json:"epoch"`
}

// PartitionStatus is seed 003's per-partition operating state.
type PartitionStatus string

const (
	PartitionActive   PartitionStatus = "Active"
	PartitionDraining PartitionStatus = "Draining"
)

// RouteEntry is one partition of the routing table: a key range of one
// table of one changefeed, the node that serves it, and the epoch of that
// placement.
type RouteEntry struct {
	ID         string          `json:"id"` // p<N>, unique in the cluster
	Changefeed ChangefeedID    `json:"changefeed"`
	Span       Span            `json:"span"`
	Node       NodeID          `json:"node,omitempty"` // empty: not placed
	Status     PartitionStatus `json:"status"`
	Epoch      uint64          `json:"epoch"`
	// Target is where a Draining partition is going.
	Target NodeID `json:"target,omitempty"`
	// Start is where this placement starts when it was handed over
	// gracefully: the previous owner's final position. Zero after an
	// ungraceful placement, which starts from the persisted progress.
	Start Ts `json:"start,omitempty"`
	// StartCopy is how far the partition's share of the initial snapshot
	// was at Start (the previous owner's final progress), so the new owner
	// copies on from there even before that progress is persisted.
	StartCopy CopyProgress `json:"start_copy,omitzero"`
	// Since is the changefeed's position when the partition's table
	// joined it (changefeed update): nothing of it is read at or below.
	// Zero: a table of the changefeed's start.
	Since Ts `json:"since,omitempty"`
	// SplitKey: the Draining partition is being split at this key (seed
	// 003's split); both halves stay on Target.
	SplitKey string `json:"split_key,omitempty"`
	// BusySince is when the partition went Draining; operations on it are
	// refused (ErrPartitionBusy) until it is Active again.
	BusySince time.Time `json:"busy_since,omitzero"`
	// Pinned: an operator placed it, so the balance scheduler leaves it
	// where it is. Drains and failures still move it.
	Pinned bool `json:"pinned,omitempty"`
	// History is what happened to the partition lately, oldest first (at
	// most MaxPartitionHistory).
	History []PartitionEvent `json:"history,omitempty"`
}

// MaxPartitionHistory bounds a routing entry's history.
const MaxPartitionHistory = 8

// PartitionEvent is one entry of a partition's history.
type PartitionEvent struct {
	Time time.Time `json:"time"`
	// Kind: split (this partition gave its upper half away), split-from
	// (it is that upper half), moved, placed (after its node died),
	// returned, recovered (its dispatcher failed and was re-created).
	Kind string `json:"kind"`
	// Epoch: for recovered, the epoch of the dispatcher that failed.
	Epoch    uint64 `json:"epoch,omitempty"`
	From     NodeID `json:"from,omitempty"`
	To       NodeID `json:"to,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Graceful bool   `json:"graceful,omitempty"`
	// Busy: how long the partition was busy (accepted no events) for a
	// split or a move, from going Draining to being placed.
	Busy time.Duration `json:"busy_ns,omitempty"`
}

// Remember appends an event to the entry's history, keeping it bounded.
func (r *RouteEntry) Remember(ev PartitionEvent) {
	h := append(append([]PartitionEvent(nil), r.History...), ev)
	if len(h) > MaxPartitionHistory {
		h = h[len(h)-MaxPartitionHistory:]
	}
	r.History = h
}

// Progress is a partition's position as its dispatcher reported it:
// everything up to Checkpoint is durable in the sink. Node and Epoch are
// the placement that reported it.
type Progress struct {
	Checkpoint Ts     `json:"checkpoint"`
	Node       NodeID `json:"node"`
	Epoch      uint64 `json:"epoch"`
	// Final: the dispatcher of this epoch has stopped, and everything up
	// to Checkpoint, and nothing after it, was written. The next owner
	// starts exactly here.
	Final bool `json:"final,omitempty"`
	// Handover: the final position was given up for a move (the routing
	// entry was Draining when the dispatcher stopped), so the move's
	// target may start there.
	Handover bool `json:"handover,omitempty"`
	// Copy is how far the partition's share of the initial snapshot was
	// as of Checkpoint (database sources with snapshot=initial).
	Copy CopyProgress `json:"copy,omitzero"`
}

// ProgressTable is a changefeed's persisted partition positions, by
// partition id; its maintainer writes it with the checkpoint.
type ProgressTable map[string]Progress

// Barrier is the DDL barrier of one table (seed 004 §4.0.5): every
// partition of the table has made all rows before the DDL durable; Writer
// (a partition id) writes the DDL; when Written, all pass.
type Barrier struct {
	Table   string `json:"table"`
	DDLTs   Ts     `json:"ddl_ts"`
	Writer  string `json:"writer"`
	Written bool   `json:"written"`
}

// SourceCleanup is what a removed changefeed left upstream to release (a
// PostgreSQL replication slot, which holds WAL until it is dropped, and
// the publication cdcctl created): it is written with the removal and
// deleted once the source is released, so a removal while the database
// is unreachable is retried until it succeeds. A create writes one
// before it pins its source (Create), deleted as the changefeed is
// written, so a create cut short is released the same way.
type SourceCleanup struct {
	Changefeed ChangefeedID `json:"changefeed"`
	// Source is the changefeed's stored source URI (it names the slot
	// and the publication).
	Source    string    `json:"source"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	LastTry   time.Time `json:"last_try,omitzero"`
	// Create marks a record written before a create pinned the source:
	// while the create runs it is the create's; if the create never
	// finished (its coordinator died, it was refused and the release
	// failed), it is released like a removal's.
	Create bool `json:"create,omitempty"`
}
