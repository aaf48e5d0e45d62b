// Package source defines where row changes come from: the contract every
// source meets (Source), the reader one partition uses (Reader) and the
// row-change model under the names sources use (aliases of engine/row,
// in row.go). Concrete sources live in subpackages (gen: the
// deterministic generator; postgres) and are named only by
// source/registry and by tests: the engine, the CLI and verify see this
// package's interfaces.
//
// It imports model and engine/row only.
package source

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Source is one changefeed's upstream, opened from its URI (see
// source/registry). One value serves every dispatcher of the changefeed
// on a node; it must be safe for concurrent use.
type Source interface {
	// Tables are the tables the changefeed replicates, in a stable order,
	// as partitions name them.
	Tables(ctx context.Context) ([]string, error)
	// Boundaries returns at most n-1 keys, ascending, that cut a table
	// into ranges of about the same amount of data.
	Boundaries(ctx context.Context, table string, n int) ([]string, error)
	// Start is the position the changefeed begins at: events after it are
	// replicated.
	Start() model.Ts
	// Open returns a reader of a span's DML after a position.
	Open(span model.Span, from model.Ts) (Reader, error)
	// DDLs returns the schema changes of a table with commit position in
	// (from, upTo], oldest first.
	DDLs(table string, from, upTo model.Ts) []Event
	// Resolved is the position up to which the source is final: no event
	// at or below it appears later.
	Resolved() model.Ts
	// Close releases what the source holds (connections); readers it
	// opened stop working.
	Close() error
}

// Reader reads one partition's key range in commit order.
type Reader interface {
	// Read returns the DML events with commit ts in (Position(), upTo],
	// oldest first, stopping after about max events. It does not split
	// the events of one commit ts (one transaction), except those of a
	// transaction larger than max, which a Parted reader returns over
	// several reads; Position() counts a commit ts only once all of it
	// has been returned. It returns nil when nothing is left up to upTo.
	// An error (the event log unreachable, ctx done) returns nothing and
	// keeps the position: the caller reads again later.
	Read(ctx context.Context, upTo model.Ts, max int) ([]Event, error)
	// Position is the commit ts up to which every event has been returned.
	Position() model.Ts
}

// Parted is a Reader that may return one large transaction over several
// reads. While it is inside one, a dispatcher does not stop: its position
// (before the transaction) could not say which of its rows were written,
// and the next owner would write them again.
type Parted interface {
	Inside() bool
}

// DDLStepper is a Reader that does not read past a schema change by
// itself (a read stops just before it): once the dispatcher has passed
// the change through the DDL barrier, StepOver moves the reader onto the
// change's position (no row shares it).
type DDLStepper interface {
	StepOver(ddl model.Ts)
}

// Copier is a source whose readers copy the rows their span held when
// the changefeed was created (the initial snapshot) while they read its
// changes. A dispatcher opens its reader with the copy's progress as of
// its start position.
type Copier interface {
	OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (Reader, error)
}

// Copying is a reader opened by a Copier: Copied is how far its copy is
// as of Position() (rows copied at or below it have all been returned).
type Copying interface {
	Copied() model.CopyProgress
}

// Closer is a reader that holds something (a connection, a lock) until
// its dispatcher ends.
type Closer interface {
	Close() error
}

// Lookahead is a Reader that knows when its next event commits. A
// dispatcher with nothing to read sleeps until then instead of polling,
// and meanwhile reports its position as reaching it: nothing of its span
// commits in between.
type Lookahead interface {
	// NextAt is the commit ts of the next event after Position(); false
	// if there will be none.
	NextAt() (model.Ts, bool)
}

// Awaiting is a Reader that knows events are on their way to it (an
// initial snapshot's chunk being read, or its watermarks coming through
// the stream): while it is, a dispatcher with nothing to read polls it
// at its base interval instead of backing off.
type Awaiting interface {
	Awaiting() bool
}

// Notifier is a Reader that can say when there may be more to read: the
// channel Changed returns is closed at its log's next append or resolve
// (nil: it cannot tell, as a log read from another node). A dispatcher
// takes it before it reads, and with nothing read waits on it as well as
// on its back-off: an idle partition then sees its stream's next
// resolved position when it comes, not up to a back-off later.
type Notifier interface {
	Changed() <-chan struct{}
}

// DDLSchedule is a source that knows when a table's next DDL commits.
type DDLSchedule interface {
	// NextDDL is the commit ts of the table's first DDL after ts; false
	// if there will be none.
	NextDDL(table string, after model.Ts) (model.Ts, bool)
}

// KeyTyped is a source whose tables' keys are encoded for routing
// (model.EncodeKey): it names a table's key column types, which the
// changefeed's spans carry so that operators' keys can be encoded and
// bounds shown as text, and the key's columns (model.KeyColumns), which
// the spans carry so that a copy can tell a key moved to other columns
// of the same types before it began (model.Span.CopyKey).
type KeyTyped interface {
	TableKey(ctx context.Context, table string) (types, columns string, err error)
}

// Expectation is what a deterministic source can say about what a sink
// must hold, so verify computes the expected content instead of reading
// an upstream. Keys are numbered densely from 0 to Keys()-1 over every
// table; each key's changes are versions 1, 2, ... carried in the row's
// "version" column, with a payload in its "value" column.
type Expectation interface {
	// Keys is the number of keys over all tables.
	Keys() int
	// KeyRef numbers a table's key; false when the source never writes it.
	KeyRef(table, key string) (int, bool)
	// KeyOf names a key number.
	KeyOf(ref int) (table, key string)
	// Versions is how many versions of a key commit at or before upTo.
	Versions(ref int, upTo model.Ts) uint64
	// VersionCommitTs is when version v of a key commits.
	VersionCommitTs(ref int, v uint64) model.Ts
	// Payload is the "value" column of version v of a key.
	Payload(ref int, v uint64) string
	// SchemaSince is the commit ts of the DDL that created the schema a
	// row committed at ts is written under; 0 for the first schema.
	SchemaSince(ts model.Ts) model.Ts
}

// Env is what a source opened on a node may use of it.
type Env struct {
	// Changefeed is the changefeed the source serves.
	Changefeed model.ChangefeedID
	// Logs reads event logs wherever their readers run (sources whose
	// changes one reader per changefeed pulls into a log).
	Logs LogReader
	// Log receives the source's warnings.
	Log *slog.Logger
}

// LogReader reads a changefeed's event log, on whichever node its reader
// runs.
type LogReader interface {
	// Read returns a span's rows after a cursor up to upTo, and the cursor
	// after them, as eventlog.Log.Read does.
	Read(ctx context.Context, cf model.ChangefeedID, span model.Span, from Cursor, upTo model.Ts, max int) ([]Event, Cursor, error)
	// DDLs returns a table's schema changes in (from, upTo].
	DDLs(ctx context.Context, cf model.ChangefeedID, table string, from, upTo model.Ts) ([]Event, error)
}

// LogWatcher is a LogReader that can say when a changefeed's log changes
// (Notifier's channel; nil when it cannot).
type LogWatcher interface {
	Changed(cf model.ChangefeedID) <-chan struct{}
}

// Cursor is where a read of an event log stands: every row at or below
// Done has been returned, and, inside a transaction returned in parts
// (At > Done), its rows from sequence Seq on are still to come.
type Cursor struct {
	Done model.Ts `json:"done"`
	At   model.Ts `json:"at,omitempty"`
	Seq  uint32   `json:"seq,omitempty"`
}

// Inside says the cursor stands inside a transaction.
func (c Cursor) Inside() bool { return c.At != 0 }

// Before says c is behind d: the next row c would read comes first.
func (c Cursor) Before(d Cursor) bool {
	next := func(c Cursor) (model.Ts, uint32) {
		if c.Inside() {
			return c.At, c.Seq
		}
		return c.Done + 1, 0
	}
	ct, cs := next(c)
	dt, ds := next(d)
	return ct < dt || ct == dt && cs < ds
}

// LogWriter is the event log as a puller fills it.
type LogWriter interface {
	// Append adds the rest of one committed transaction's events (schema
	// changes, each of a table at its own position, different tables'
	// sharing them; then its rows) and resolves up to its highest
	// position. It keeps no reference to the slice: the caller
	// may reuse its array once Append returns (the events' values it may
	// keep: they are never changed).
	Append(events []Event) error
	// AppendPart adds rows of a transaction that has not committed yet,
	// all at the position its commit will have: a large transaction goes
	// to the log, on disk, as it arrives. Readers see them only once
	// Append (or Resolve) passes their position.
	AppendPart(rows []Event) error
	// ErasePart drops a table's rows that the open transaction's parts
	// added (a TRUNCATE later in the transaction erased them).
	ErasePart(table string) error
	// TruncatePart drops the open transaction's rows from its keep-th
	// on, in the order its parts added them: rows a rollback to a
	// savepoint undid, which MySQL writes into its binary log before the
	// ROLLBACK TO when the transaction changed a non-transactional table.
	TruncatePart(keep int) error
	// Resolve says nothing commits at or below ts later.
	Resolve(ts model.Ts)
	// Hold stops one table at a position (it cannot go on: renamed, a row
	// that does not decode): its partitions read nothing at or above it,
	// so their checkpoints stay below it while other tables advance.
	Hold(table string, at model.Ts)
}

// Quantiles returns at most n-1 keys that cut encoded keys into n ranges
// of about as many keys each, ascending and distinct (Boundaries of the
// database sources, from the keys they read or sampled).
func Quantiles(keys []string, n int) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	var out []string
	for i := 1; i < n; i++ {
		idx := i * len(keys) / n
		if idx <= 0 || idx >= len(keys) {
			continue
		}
		if k := keys[idx]; len(out) == 0 || out[len(out)-1] < k {
			out = append(out, k)
		}
	}
	return out
}

// ErrUnresumable is what a puller's error wraps when the upstream no
// longer holds what the changefeed resumes from (MySQL: its binary log
// purged): going on from anywhere else would lose changes, so the
// changefeed fails with the reason instead of retrying, and the operator
// chooses (docs: copy its tables again, changefeed resnapshot, or remove it).
var ErrUnresumable = errors.New("the upstream no longer holds what the changefeed resumes from")

// Position is a puller's resume point, opaque to the engine: what it
// needs to read on from a checkpoint exactly as it read before. The
// maintainer stores it with the checkpoint.
type Position = json.RawMessage

// Puller is a source whose changes one upstream reader per changefeed
// pulls (one replication slot, one binlog connection), run on the node
// that maintains the changefeed; dispatchers everywhere read its log
// through Env.Logs.
type Puller interface {
	// Pull reads the upstream from a resume point into w until ctx ends
	// or the upstream fails; it returns why it stopped.
	Pull(ctx context.Context, from Position, w LogWriter) error
	// ResumePoint is the resume point at or below a checkpoint that
	// this puller has passed; false when it has none yet.
	ResumePoint(checkpoint model.Ts) (Position, bool)
	// Confirm tells the upstream that everything up to a resume point is
	// stored downstream, so it may free what it kept for it (PostgreSQL:
	// the slot's confirmed position). Only a persisted point may be
	// confirmed.
	Confirm(p Position)
}

// CopyingTable is a table whose initial snapshot is still copying, as
// its partitions' routes and progress say: the key types its partitions
// were cut on (model.Span.Key) and the key columns their copies go by
// (model.CopyProgress.Key); "" where not known.
type CopyingTable struct {
	KeyTypes, KeyColumns string
}

// Status is what a source says about its upstream side of a changefeed,
// for 'changefeed get'.
type Status struct {
	Kind string `json:"kind"`
	// Slot is the replication slot (PostgreSQL); Active whether a reader
	// streams from it now.
	Slot   string `json:"slot,omitempty"`
	Active bool   `json:"active"`
	// Position is the upstream position confirmed as stored downstream.
	Position string `json:"position,omitempty"`
	// RetainedBytes is how much upstream log is kept for the changefeed
	// (PostgreSQL: WAL the slot holds back).
	RetainedBytes int64 `json:"retained_bytes"`
	// SafeBytes is how much more log may be written before the upstream
	// gives up what the changefeed still needs (PostgreSQL's
	// safe_wal_size, under max_slot_wal_keep_size); nil when unbounded.
	// WALStatus is PostgreSQL's wal_status of the slot (reserved,
	// extended, unreserved, lost).
	SafeBytes *int64 `json:"safe_bytes,omitempty"`
	WALStatus string `json:"wal_status,omitempty"`
	// RetentionSeconds is how long the upstream keeps its log whatever
	// its readers need (MySQL: binlog_expire_logs_seconds); 0 when that
	// is not bounded by time (PostgreSQL's slots hold what they need).
	// A changefeed further behind than that finds its position purged.
	RetentionSeconds int64 `json:"retention_seconds,omitempty"`
	// Purged says the upstream no longer holds the position (MySQL: its
	// binary log file was purged): the changefeed cannot resume from it.
	Purged bool `json:"purged,omitempty"`
	// Snapshot says how far the initial snapshot is, as of the last
	// persisted resume point.
	Snapshot string `json:"snapshot,omitempty"`
	// Filter is the changefeed's table rules, if it has patterns;
	// Unreplicated, the tables they match that it does not replicate, each
	// with why.
	Filter       string   `json:"filter,omitempty"`
	Unreplicated []string `json:"unreplicated,omitempty"`
	// Warnings are what in the upstream's schema the changefeed cannot
	// carry as the upstream applies it (MySQL: a foreign key's cascade,
	// whose changes the binary log does not have), each with what to do.
	Warnings []string `json:"warnings,omitempty"`
}

// Followed is what a changefeed's table rules match now: the tables to
// replicate, and those matched that cannot be, each with why.
type Followed struct {
	Tables  []string
	Refused []string
	// At is the database's clock once the rules were matched (0: not
	// known): a table they no longer match was renamed or dropped
	// before it, so a changefeed whose partitions of that table have
	// passed it (or stopped at its hold) has written everything the
	// table had under its name.
	At model.Ts
}

// Snapshotter reads a database source's tables at one consistent point,
// for verify: rows by primary key (the key columns' text joined by
// commas), column name to text (nil for NULL), and the upstream's clock
// at that point.
type Snapshotter interface {
	Snapshot(ctx context.Context, tables []string) (time.Time, map[string]map[string]map[string]*string, error)
}

// Retabled is a change of a running changefeed's tables (changefeed
// update), as its source computes it: the URI and the reader's resume
// point to store, and which tables come and go.
type Retabled struct {
	URI      string
	Position Position
	// Tables are the changefeed's tables after the change, in order.
	Tables         []string
	Added, Removed []string
	// Again are tables kept that are copied again (Retable's again): as
	// if removed and added back in the change, their resume state read
	// anew from the catalog, truncated in the sink and copied from the
	// changefeed's checkpoint.
	Again []string
	// Rules are the table rules after the change, if it has them.
	Rules []string
	// Ended are the removed tables that no longer exist upstream under
	// their name, each with its last definition and, when it was renamed,
	// its new name: the sink is told (a DROP TABLE, or a rename).
	Ended map[string]EndedTable
	// EndedAt is the database's clock once they had ended (0: not
	// known): after every change they had under their names, and
	// before a table of those names can come back (its TRUNCATE).
	EndedAt model.Ts
	// Finish, when set, makes what is left of the change upstream once
	// it is stored (PostgreSQL: the changefeed's own publication loses
	// the removed tables, and any other it holds that none of the
	// changefeed's tables is). Retable leaves that for after the store: a
	// change that cannot be stored is undone without a table having
	// been out of the publication, whose changes meanwhile would never
	// be sent. Left uncalled (a crash in between), the tables stay
	// published, their changes decoded and dropped, until the next
	// change's Finish.
	Finish func(ctx context.Context) error
	// Undo, when set, takes back what the change made upstream (the
	// tables it put in the publication), for a change known not to be
	// stored.
	Undo func(ctx context.Context) error
	// Unpublished are the relations the source's own publication is to
	// lose once the change is stored (its Finish), sorted: the removed
	// tables (a removed table renamed upstream under the name the
	// changefeed knew), and any other it names that none of the
	// changefeed's tables is (one added there by hand, or renamed away
	// from a table copied again). Set with or without apply, so that a
	// dry run shows them.
	Unpublished []string
}

// EndedTable is a table removed from a changefeed because it was dropped
// or renamed upstream.
type EndedTable struct {
	Def *TableDef
	// RenamedTo is its name now (model.TableName); "" when dropped.
	RenamedTo string
}

// TableIssue is a table's issue as its reader found it (model.TableIssue).
type TableIssue = model.TableIssue

// Table issue states.
const (
	TableHeld    = model.TableHeld
	TableDropped = model.TableDropped
)

// IssueReporter is a puller that reports its tables' issues: those of
// its current run (a new run finds them again, or not).
type IssueReporter interface {
	TableIssues() []TableIssue
}
