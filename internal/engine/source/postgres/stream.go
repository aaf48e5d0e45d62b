package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TableState is where a table's schema stands in the stream: its
// definition, how many schema changes came before it, and since when.
type TableState struct {
	Def     *source.TableDef `json:"def"`
	Version uint64           `json:"version,omitempty"`
	Since   model.Ts         `json:"since"`
	// OID is the table's relation: a rename keeps it, a drop ends it.
	OID uint32 `json:"oid,omitempty"`
	// RewriteCols are the columns after the ALTER of a rewrite mark
	// (rewrites.go) that copied the table again, until the stream next
	// describes the table: a type change met there with exactly these
	// columns is that ALTER's, copied already.
	RewriteCols string `json:"rewrite_cols,omitempty"`
	// ResetAt is where the table came back to the changefeed after it
	// was removed (changefeed update, or rules following a drop and a
	// create): its rows up to there are an earlier table's, or were
	// written while it was out, and are not read. The sink forgets what
	// it had: the first transaction after begins with a TRUNCATE of it.
	ResetAt model.Ts `json:"reset_at,omitempty"`
	// JoinedAt is where a table added to the changefeed with a snapshot
	// joined it (the database's clock then): nothing of it at or before
	// is read, since its copy, made after, holds all of it, and its
	// definition is the catalog's of then. Read from the checkpoint
	// instead, its older rows and schemas met that definition: a
	// column added since looked dropped and added again, its older
	// values unknown, and the table was held (the remedy, removing and
	// adding it back, met the same).
	JoinedAt model.Ts `json:"joined_at,omitempty"`
	// Nums are Def's columns' attribute numbers, in its order (0 where
	// not known): what tells a column renamed from one dropped and
	// another added (columns.go). A checkpoint written before they were
	// kept has none until the table's columns are read again.
	Nums []int16 `json:"nums,omitempty"`
}

// unread says the open transaction is one of a table's that the reader
// passes over: before it came back (ResetAt) or joined (JoinedAt).
func (s *Stream) unread(st *TableState) bool {
	return st != nil && (st.ResetAt != 0 && s.base <= st.ResetAt || st.JoinedAt != 0 && s.base <= st.JoinedAt)
}

// Txn is one committed upstream transaction, decoded: its schema changes
// (DDL events, each at its own commit position) and then its rows, all
// rows at Ts.
type Txn struct {
	Ts         model.Ts
	Xid        uint32 // its transaction id (visible.go)
	CommitTime time.Time
	CommitLSN  pglogrepl.LSN
	// EndLSN is where the slot may be confirmed once this transaction is
	// durable downstream.
	EndLSN pglogrepl.LSN
	Events []source.Event
	// Parted says rows of it came before, as parts.
	Parted bool
	// Marks are the contents of the transaction's logical decoding
	// messages with prefix "cdcctl" (the snapshot's watermarks).
	Marks [][]byte
	// Again are the tables its schema changes rewrote, to copy again
	// (again.go).
	Again []copyAgain
}

// markPrefix names this program's logical decoding messages (the
// snapshot's watermarks), tickPrefix its ticks (resolved positions).
const (
	markPrefix = "cdcctl"
	tickPrefix = "cdcctl.tick"
)

// Item is what Next returns: a transaction; or Part, rows of a large
// transaction still being received (at the position its commit will
// have: the commit follows, with the rest), or Erase, tables whose rows
// in those parts a TRUNCATE erased; or a resolved position: no
// transaction commits at or below Resolved later, and the server has
// sent everything before ResolvedLSN. A resolved position is
// a resume point like a transaction's end: reading on from ResolvedLSN
// with Resolved as the last position gives later transactions the same
// positions.
type Item struct {
	Txn  *Txn
	Part []source.Event
	// Erase names tables whose rows in the open transaction's parts a
	// TRUNCATE erased.
	Erase       []string
	Resolved    model.Ts
	ResolvedLSN pglogrepl.LSN
}

// Stream reads one slot's pgoutput stream. It is not safe for concurrent
// use: one goroutine calls Next and Confirm.
type Stream struct {
	// System is the server's database cluster (IDENTIFY_SYSTEM's
	// system identifier), Timeline its timeline: what the resume points
	// read here belong to.
	System   string
	Timeline int32

	cfg  Config
	conn *pgconn.PgConn
	cat  *catalog

	tables map[string]*TableState // by "schema.table"
	rels   map[uint32]*relation   // by relation id, for this session
	last   model.Ts               // the last position handed out

	received pglogrepl.LSN
	// ticks: resolved positions come from ticks this stream writes into
	// the WAL (PostgreSQL 14 or later). Otherwise from a probe of the
	// upstream: its WAL insert position and clock at one instant (0 when
	// none is pending).
	ticks      bool
	probeLSN   pglogrepl.LSN
	probeAt    time.Time
	confirmed  atomic.Uint64 // pglogrepl.LSN; Confirm may come from any goroutine
	nextStatus time.Time
	// nextTick is when the stream may write its next tick; resolvedAt,
	// when it last handed out a position (a transaction or a resolved
	// one); tickLSN and tickAt, its last tick's place in the WAL and when
	// it was written (ticks.go).
	nextTick   time.Time
	resolvedAt time.Time
	tickLSN    pglogrepl.LSN
	tickAt     time.Time

	// The transaction being received: its positions are fixed at its
	// begin, which carries the commit time; schema changes take theirs
	// from base on (slots.go), and rows base+ddlSlots.
	open bool
	xid  uint32
	base model.Ts
	ddls []source.Event
	// pendingNums are the attribute numbers of the columns the open
	// transaction's schema changes gave tables (nil: not known).
	pendingNums map[string][]int16
	// again are the tables the open transaction's type changes rewrote
	// (again.go).
	again []copyAgain
	// pubBefore is the open transaction's mark before an ALTER
	// PUBLICATION, until the mark after it (publicationmarks.go).
	pubBefore *publicationMark
	// recheck are the tables whose columns its relation messages paired
	// by their names alone (again.go).
	recheck []recheck
	rows    []source.Event
	size    int // bytes in rows
	parted  bool
	marks   [][]byte
	// visible is the last transaction seen visible to the catalog's
	// queries (awaitVisible), which waits up to visibleWait for one.
	visible     uint32
	visibleWait time.Duration
	// partedTables have rows in the parts handed out; erase, those a
	// TRUNCATE erased since.
	partedTables map[string]bool
	erase        []string
	// gone are the tables removed from the changefeed; goneAt, when
	// (position.GoneAt).
	gone, goneAt map[string]model.Ts
	// resets are the tables whose TRUNCATE after their ResetAt is still
	// ahead of the stream.
	resets map[string]bool
	// held are the tables held in this run (holds.go); holds, those
	// held since the last TakeHolds.
	held  map[string]Hold
	holds []Hold
	// cf names the changefeed in what a hold says to do.
	cf string
	// unresolved are tables whose relation was not found by name when
	// the stream opened.
	unresolved []string
}

// ddlSlots is how many positions one transaction has for schema changes
// (slots.go): its rows' position is fixed before they arrive, after
// them.
const ddlSlots = 64

// partRows and partBytes bound the rows of one transaction held in
// memory: beyond either, they go to the event log (on disk) as a part.
// Variables: tests use small parts.
var (
	partRows  = 4096
	partBytes = 4 << 20
)

// relation is a relation id's columns as its last Relation message gave
// them, mapped onto the table's definition.
type relation struct {
	table string
	cols  []*pglogrepl.RelationMessageColumn
	// foreign: a table the changefeed does not replicate (a partition
	// described before its root, a table the operator's publication
	// serves others); its rows are not ours.
	foreign bool
	// gone: a table removed from the changefeed (changefeed update); its
	// changes still in the WAL before the removal are dropped.
	gone bool
	// held: a table held in this run (holds.go); its rows are dropped.
	held bool
}

// slotGone says why the slot can no longer give the changes the
// changefeed resumes from ("" when it can, or the error says nothing of
// it): it was dropped outside cdcctl, or PostgreSQL invalidated it (its
// WAL went past max_slot_wal_keep_size). No retry brings those changes
// back, and a slot made again would start after them: the changefeed
// fails, saying what to do (retrying, it advised raising
// max_replication_slots, for ever).
func slotGone(cfg Config, err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch {
	case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "replication slot"):
		return slotDropped(cfg)
	case pgErr.Code == "55000" && (strings.Contains(pgErr.Detail, "invalidated") || strings.Contains(pgErr.Message, "can no longer get changes")):
		detail := pgErr.Detail
		if detail == "" {
			detail = pgErr.Message
		}
		return slotInvalidated(cfg, detail)
	}
	return ""
}

// publicationGone says why the changefeed's publication cannot give its
// changes ("" when the error, its SQLSTATE, message and the server's
// routine, says nothing of it): it was dropped (DROP
// PUBLICATION, or DROP OWNED BY the changefeed's user). pgoutput reads
// the catalog as it was at each change's place in the WAL, so every
// start of the stream meets the drop again: retrying, the reader failed
// for ever, and the status told the operator to add the table to a
// publication that no longer existed.
func publicationGone(cfg Config, code, message, routine string) string {
	// The routine's name is never translated; the message may be.
	if code != "42704" || !strings.Contains(message, "publication") && routine != "GetPublicationByName" {
		return ""
	}
	return fmt.Sprintf("publication %s does not exist at the changefeed's place in the WAL: it was dropped (DROP PUBLICATION, or DROP OWNED BY the changefeed's user), and PostgreSQL cannot decode the changes after the drop, also once a publication of that name is created again; remove the changefeed and create it again (its tables are copied again). PostgreSQL said: %s", cfg.Publication, message)
}

// slotRemedy is what to do about a slot that lost the changefeed's
// changes.
const slotRemedy = "remove the changefeed and create it again (its tables are copied again); to keep this from happening, raise max_slot_wal_keep_size or keep changefeeds from being paused or failing that long (the alert CdcctlSlotRetainsMuchWAL warns)"

// slotDropped and slotInvalidated say why a slot cannot give the changes
// the changefeed resumes from, the same whether the stream's start or a
// resume's check found it.
func slotDropped(cfg Config) string {
	return fmt.Sprintf("replication slot %s does not exist: it was dropped outside cdcctl, and with it the changes the changefeed resumes from: %s", cfg.Slot, slotRemedy)
}

func slotInvalidated(cfg Config, detail string) string {
	return fmt.Sprintf("PostgreSQL invalidated replication slot %s (%s): the WAL the changefeed resumes from is gone: %s", cfg.Slot, detail, slotRemedy)
}

// errSlotInUse means another connection streams from the slot.
var errSlotInUse = errors.New("the replication slot is in use by another consumer")

// statusInterval is how often the stream tells PostgreSQL where it is
// (well under wal_sender_timeout's default of 60s) and asks for a
// keepalive, which resolves an idle stream.
const statusInterval = time.Second

// resolvedMargin keeps a resolved position behind the clock of the probe
// it comes from: a transaction's commit time is taken just before its
// commit record is written, so one committing at the moment of the probe
// can carry a slightly earlier time and a record after the probe's
// position. Commit positions then never need clamping against a resolved
// one, which keeps them the same when a stream is read again from a
// checkpoint: a dispatcher's position means the same transactions.
const resolvedMargin = 50 * time.Millisecond

// OpenStream starts reading the slot after a position: from is the
// confirmed LSN to resume at (the slot starts at the later of it and its
// own confirmed position), last is the commit position handed out for
// it, and tables where every table's schema stands there.
//
// With marks, the stream also carries this program's logical decoding
// messages (the snapshot's watermarks; PostgreSQL 14 or later). system
// is the database cluster's system identifier where from was read (""
// when not known): another cluster's server is refused.
func OpenStream(ctx context.Context, cfg Config, from pglogrepl.LSN, last model.Ts, tables map[string]TableState, marks bool, system string) (*Stream, error) {
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return nil, explain(cfg, err)
	}
	var version int
	if err := cat.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		cat.Close()
		return nil, explain(cfg, err)
	}
	ticks := version >= 140000 // pgoutput sends logical decoding messages from 14 on
	pc, conn, err := replicationConn(ctx, cfg)
	if err != nil {
		cat.Close()
		return nil, err
	}
	id, err := resumeChecks(ctx, cfg, pc, conn, cat.conn, system, from)
	if err != nil {
		_ = conn.Close(context.Background())
		cat.Close()
		return nil, explain(cfg, err)
	}
	err = pglogrepl.StartReplication(ctx, conn, cfg.Slot, from, pglogrepl.StartReplicationOptions{
		PluginArgs: pluginArgs(cfg, marks || ticks),
	})
	if err != nil {
		_ = conn.Close(context.Background())
		cat.Close()
		if strings.Contains(err.Error(), "is active for PID") {
			return nil, fmt.Errorf("%w: replication slot %s: %v; stop that consumer, or name another slot", errSlotInUse, cfg.Slot, err)
		}
		if why := slotGone(cfg, err); why != "" {
			return nil, fmt.Errorf("%s (%w)", why, source.ErrUnresumable)
		}
		return nil, fmt.Errorf("start replication on slot %s: %w", cfg.Slot, explain(cfg, err))
	}
	s := &Stream{System: id.SystemID, Timeline: id.Timeline, cfg: cfg, conn: conn, cat: cat, tables: map[string]*TableState{}, pendingNums: map[string][]int16{}, rels: map[uint32]*relation{},
		last: last, received: from, ticks: ticks, partedTables: map[string]bool{}, held: map[string]Hold{}, visibleWait: visibleWait}
	s.confirmed.Store(uint64(from))
	for t, st := range tables {
		st := st
		s.tables[t] = &st
		if st.ResetAt != 0 && last <= st.ResetAt {
			if s.resets == nil {
				s.resets = map[string]bool{}
			}
			s.resets[t] = true
		}
	}
	if err := s.fillOIDs(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func pluginArgs(cfg Config, marks bool) []string {
	args := []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", cfg.Publication)}
	if marks {
		args = append(args, "messages 'true'")
	}
	return args
}

// changefeed is the changefeed's name for messages.
func (s *Stream) changefeed() string {
	if s.cf == "" {
		return "NAME"
	}
	return s.cf
}

// Ignore names tables removed from the changefeed: the WAL read again
// from before their removal still holds their changes, which are
// dropped, not an error. goneAt says when each was removed, on the
// database's clock (position.GoneAt).
func (s *Stream) Ignore(gone, goneAt map[string]model.Ts) { s.gone, s.goneAt = gone, goneAt }

// Close ends the replication connection; the slot stays.
func (s *Stream) Close() error {
	s.cat.Close()
	return s.conn.Close(context.Background())
}

// Confirm tells the stream that everything up to lsn is durable
// downstream; the slot's confirmed position follows on the next status
// update, and PostgreSQL may then recycle the WAL before it. It is safe
// to call from any goroutine.
func (s *Stream) Confirm(lsn pglogrepl.LSN) {
	for {
		cur := s.confirmed.Load()
		if uint64(lsn) <= cur || s.confirmed.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// Tables returns where every table's schema stands after the last item.
func (s *Stream) Tables() map[string]TableState {
	out := make(map[string]TableState, len(s.tables))
	for t, st := range s.tables {
		out[t] = *st
	}
	return out
}
