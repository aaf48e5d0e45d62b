package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TableState is where a table's schema stands in the stream: its
// definition, how many schema changes came before it, and since when.
type TableState struct {
	Def     *source.TableDef `json:"def"`
	Version uint64           `json:"version,omitempty"`
	Since   model.Ts         `json:"since"`
}

// Txn is one committed upstream transaction, decoded: its schema changes
// (DDL events, each at its own commit position) and then its rows, all
// rows at Ts.
type Txn struct {
	Ts         model.Ts
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
// in those parts a TRUNCATE erased; or a resolved position: no transaction commits at or below Resolved later, and the
// server has sent everything before ResolvedLSN. A resolved position is
// a resume point like a transaction's end: reading on from ResolvedLSN
// with Resolved as the last position gives later transactions the same
// positions.
type Item struct {
	Txn  *Txn
	Part []source.Event
	// Erase names tables whose rows in the open transaction's parts a
	// TRUNCATE erased; Resolved is then the parts' position.
	Erase       []string
	Resolved    model.Ts
	ResolvedLSN pglogrepl.LSN
}

// Stream reads one slot's pgoutput stream. It is not safe for concurrent
// use: one goroutine calls Next and Confirm.
type Stream struct {
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

	// The transaction being received: its positions are fixed at its
	// begin, which carries the commit time; schema changes take base,
	// base+1, ... and rows base+ddlSlots.
	open   bool
	base   model.Ts
	ddls   []source.Event
	rows   []source.Event
	size   int // bytes in rows
	parted bool
	marks  [][]byte
	// partedTables have rows in the parts handed out; erase, those a
	// TRUNCATE erased since.
	partedTables map[string]bool
	erase        []string
}

// ddlSlots is how many schema changes of replicated tables one
// transaction may carry: its rows' position is fixed before they arrive,
// after that many positions for the changes.
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
// messages (the snapshot's watermarks; PostgreSQL 14 or later).
func OpenStream(ctx context.Context, cfg Config, from pglogrepl.LSN, last model.Ts, tables map[string]TableState, marks bool) (*Stream, error) {
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
	pc, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		cat.Close()
		return nil, err
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
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
		return nil, fmt.Errorf("start replication on slot %s: %w", cfg.Slot, explain(cfg, err))
	}
	s := &Stream{cfg: cfg, conn: conn, cat: cat, tables: map[string]*TableState{}, rels: map[uint32]*relation{},
		last: last, received: from, ticks: ticks, partedTables: map[string]bool{}}
	s.confirmed.Store(uint64(from))
	for t, st := range tables {
		st := st
		s.tables[t] = &st
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

// Next returns the next committed transaction or resolved position. It
// waits until there is one or ctx ends.
func (s *Stream) Next(ctx context.Context) (Item, error) {
	for {
		if err := s.maybeSendStatus(ctx, false); err != nil {
			return Item{}, err
		}
		rctx, cancel := context.WithDeadline(ctx, s.nextStatus)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return Item{}, ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return Item{}, fmt.Errorf("replication stream of slot %s: %w", s.cfg.Slot, explain(s.cfg, err))
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return Item{}, fmt.Errorf("replication stream of slot %s: PostgreSQL: %s [SQLSTATE %s]", s.cfg.Slot, msg.Message, msg.Code)
		case *pgproto3.CopyData:
			item, ok, err := s.handle(ctx, msg.Data)
			if err != nil || ok {
				return item, err
			}
		}
	}
}

func (s *Stream) maybeSendStatus(ctx context.Context, now bool) error {
	if !now && time.Now().Before(s.nextStatus) {
		return nil
	}
	if s.ticks {
		// A tick: the server's clock, written into the WAL as a
		// non-transactional message. When the stream reaches it, every
		// transaction whose commit record is before it has arrived; and
		// since it is in the WAL, reading the stream again from a resume
		// point meets the same ticks at the same places, so every
		// position comes out the same.
		if _, err := s.cat.conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text)`, tickPrefix); err != nil {
			return fmt.Errorf("write a tick into the upstream's WAL: %w", explain(s.cfg, err))
		}
	} else if s.probeLSN == 0 {
		// Where the WAL ends now, by the server's clock: a resolved
		// position once the stream has passed it.
		var lsn string
		var at time.Time
		if err := s.cat.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, clock_timestamp()`).Scan(&lsn, &at); err != nil {
			return fmt.Errorf("read the upstream's WAL position: %w", explain(s.cfg, err))
		}
		p, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return err
		}
		s.probeLSN, s.probeAt = p, at
	}
	confirmed := pglogrepl.LSN(s.confirmed.Load())
	// Asking for a reply makes the server answer with a keepalive: the
	// resolved position of an idle upstream moves every interval.
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: max(s.received, confirmed), WALFlushPosition: confirmed, WALApplyPosition: confirmed, ReplyRequested: true,
	})
	if err != nil {
		return fmt.Errorf("replication status to slot %s: %w", s.cfg.Slot, err)
	}
	s.nextStatus = time.Now().Add(statusInterval)
	return nil
}

// handle takes one CopyData message; ok when it completes an item.
func (s *Stream) handle(ctx context.Context, data []byte) (Item, bool, error) {
	if len(data) == 0 {
		return Item{}, false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return Item{}, false, err
		}
		if ka.ReplyRequested {
			if err := s.maybeSendStatus(ctx, true); err != nil {
				return Item{}, false, err
			}
		}
		if s.open {
			return Item{}, false, nil
		}
		s.received = max(s.received, ka.ServerWALEnd)
		// The keepalive's WAL end is what the server has decoded and
		// sent. Once it passes the WAL position a probe read, every
		// transaction that committed before the probe's clock has
		// arrived. (The keepalive's own clock says nothing of the kind:
		// a walsender behind on decoding answers with the time now.)
		if s.ticks || s.probeLSN == 0 || s.received < s.probeLSN {
			return Item{}, false, nil
		}
		res := model.TsFromTime(s.probeAt.Add(-resolvedMargin))
		s.probeLSN = 0
		if res <= s.last {
			return Item{}, false, nil
		}
		s.last = res
		return Item{Resolved: res, ResolvedLSN: ka.ServerWALEnd}, true, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return Item{}, false, err
		}
		msg, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			return Item{}, false, fmt.Errorf("decode pgoutput message: %w", err)
		}
		return s.decode(ctx, msg)
	}
	return Item{}, false, nil
}

// decode applies one pgoutput message to the open transaction.
func (s *Stream) decode(ctx context.Context, msg pglogrepl.Message) (Item, bool, error) {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		s.open, s.base, s.ddls, s.rows, s.size, s.parted, s.marks = true, s.next(m.CommitTime), nil, nil, 0, false, nil
		clear(s.partedTables)
	case *pglogrepl.RelationMessage:
		return Item{}, false, s.relation(ctx, m)
	case *pglogrepl.InsertMessage:
		return s.part(s.row(m.RelationID, source.OpInsert, m.Tuple, nil))
	case *pglogrepl.UpdateMessage:
		return s.part(s.row(m.RelationID, source.OpUpdate, m.NewTuple, m.OldTuple))
	case *pglogrepl.DeleteMessage:
		return s.part(s.row(m.RelationID, source.OpDelete, nil, m.OldTuple))
	case *pglogrepl.TruncateMessage:
		if err := s.truncate(m); err != nil || len(s.erase) == 0 {
			return Item{}, false, err
		}
		erase := s.erase
		s.erase = nil
		return Item{Erase: erase, Resolved: s.rowsTs()}, true, nil
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix == markPrefix && m.Transactional && s.open {
			s.marks = append(s.marks, append([]byte(nil), m.Content...))
		}
		if m.Prefix == tickPrefix && !m.Transactional && !s.open && s.ticks {
			return s.tick(m)
		}
	case *pglogrepl.CommitMessage:
		return s.commit(m), true, nil
	}
	return Item{}, false, nil
}

// part hands out the open transaction's rows as a part once they pass
// the bounds of memory.
func (s *Stream) part(err error) (Item, bool, error) {
	if err != nil || len(s.rows) < partRows && s.size < partBytes {
		return Item{}, false, err
	}
	rows := s.rows
	for _, e := range rows {
		s.partedTables[e.Table] = true
	}
	s.rows, s.size, s.parted = nil, 0, true
	return Item{Part: rows}, true, nil
}

// tick resolves the stream up to the clock a tick carries, less the
// margin. Any reader's tick will do: they are all in the WAL.
func (s *Stream) tick(m *pglogrepl.LogicalDecodingMessage) (Item, bool, error) {
	us, err := strconv.ParseInt(string(m.Content), 10, 64)
	if err != nil {
		return Item{}, false, nil // not one of ours after all
	}
	s.received = max(s.received, m.LSN)
	res := model.TsFromTime(time.UnixMicro(us).Add(-resolvedMargin))
	if res <= s.last {
		return Item{}, false, nil
	}
	s.last = res
	return Item{Resolved: res, ResolvedLSN: m.LSN}, true, nil
}

// commit completes the transaction: its schema changes become the
// tables' schemas, and the rows not handed out in parts go with it.
func (s *Stream) commit(m *pglogrepl.CommitMessage) Item {
	tx := &Txn{Ts: s.rowsTs(), CommitTime: m.CommitTime, CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, Parted: s.parted}
	for _, d := range s.ddls {
		st := s.tables[d.Table]
		st.Def, st.Version, st.Since = d.Def, d.SchemaVersion, d.CommitTs
		tx.Events = append(tx.Events, d)
	}
	tx.Events = append(tx.Events, s.rows...)
	tx.Marks = s.marks
	s.last = tx.Ts
	s.received = max(s.received, m.TransactionEndLSN)
	s.open, s.ddls, s.rows, s.size, s.parted, s.marks = false, nil, nil, 0, false, nil
	return Item{Txn: tx}
}

// rowsTs is the open transaction's rows' position.
func (s *Stream) rowsTs() model.Ts { return s.base + ddlSlots }

// next is the position after the last one for a commit at t: the commit
// time with microseconds in the logical bits, or one more than the last.
func (s *Stream) next(t time.Time) model.Ts {
	return max(model.TsFromMicros(t.UnixMicro()), s.last+1)
}

// relation records a relation's columns; when they differ from the
// table's definition it is a schema change, written before the
// transaction's rows.
func (s *Stream) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	name := m.Namespace + "." + m.RelationName
	st, ok := s.tables[name]
	if !ok {
		return fmt.Errorf("the publication sends table %s, which the changefeed does not replicate; publish only its tables", name)
	}
	s.rels[m.RelationID] = &relation{table: name, cols: m.Columns}
	cur := st.Def
	if pending := s.pendingDef(name); pending != nil {
		cur = pending
	}
	def, err := s.defOf(ctx, name, m.Columns, m.ReplicaIdentity == 'f', cur)
	if err != nil {
		return err
	}
	if sameColumns(def, cur) {
		return nil
	}
	version := st.Version + 1
	for _, d := range s.ddls {
		if d.Table == name {
			version = d.SchemaVersion + 1
		}
	}
	if len(s.ddls) == ddlSlots {
		return fmt.Errorf("a transaction changed the columns of replicated tables more than %d times; split such schema changes over several transactions", ddlSlots)
	}
	at := s.base + model.Ts(len(s.ddls))
	s.ddls = append(s.ddls, source.Event{Kind: source.KindDDL, Table: name, CommitTs: at, TableVersion: at, Def: def, SchemaVersion: version, Statement: describeChange(name, cur, def, s.missingValues(ctx, name, cur, def))})
	return nil
}

// truncate turns a TRUNCATE into a schema change of each table it empties:
// a new table version, same columns, whose statement says TRUNCATE. The
// transaction's rows of those tables before it are dropped (the TRUNCATE
// erases them; its rows all share one position after its schema
// changes).
func (s *Stream) truncate(m *pglogrepl.TruncateMessage) error {
	for _, id := range m.RelationIDs {
		rel, ok := s.rels[id]
		if !ok {
			return fmt.Errorf("pgoutput sent a TRUNCATE of relation %d before its definition", id)
		}
		if s.partedTables[rel.table] {
			// Rows of it already went to the log as parts: they are
			// erased there (unseen yet, they were never read).
			s.erase = append(s.erase, rel.table)
			delete(s.partedTables, rel.table)
		}
		st := s.tables[rel.table]
		def, version := st.Def, st.Version+1
		if d := s.pendingDDL(rel.table); d != nil {
			def, version = d.Def, d.SchemaVersion+1
		}
		if len(s.ddls) == ddlSlots {
			return fmt.Errorf("a transaction changed replicated tables' schemas more than %d times; split it", ddlSlots)
		}
		at := s.base + model.Ts(len(s.ddls))
		s.ddls = append(s.ddls, source.Event{Kind: source.KindDDL, Table: rel.table, CommitTs: at, TableVersion: at, Def: def, SchemaVersion: version,
			Statement: source.TruncatePrefix + quoteQualified(rel.table)})
		kept := s.rows[:0]
		for _, e := range s.rows {
			if e.Table != rel.table {
				kept = append(kept, e)
			}
		}
		s.rows = kept
	}
	return nil
}

// pendingDef is the definition a schema change earlier in the open
// transaction gave a table, or nil.
func (s *Stream) pendingDef(table string) *source.TableDef {
	if d := s.pendingDDL(table); d != nil {
		return d.Def
	}
	return nil
}

// pendingDDL is the last schema change of a table in the open
// transaction, or nil.
func (s *Stream) pendingDDL(table string) *source.Event {
	var last *source.Event
	for i := range s.ddls {
		if s.ddls[i].Table == table {
			last = &s.ddls[i]
		}
	}
	return last
}

// defOf builds a definition from a Relation message. Nullability and the
// order of a composite key are not in the message: they come from the
// previous definition where the column is the same, else from the
// catalog.
//
// Under REPLICA IDENTITY FULL every column is flagged as part of the
// identity: the primary key is then the previous definition's.
func (s *Stream) defOf(ctx context.Context, table string, cols []*pglogrepl.RelationMessageColumn, full bool, prev *source.TableDef) (*source.TableDef, error) {
	schema, name := source.SplitQualifiedName(table)
	def := &source.TableDef{Schema: schema, Name: name}
	var keyCols []int
	for i, c := range cols {
		typ, err := s.cat.typeName(ctx, c.DataType, c.TypeModifier)
		if err != nil {
			return nil, err
		}
		cd := source.ColumnDef{Name: c.Name, Type: typ, Nullable: c.Flags&1 == 0}
		if prev != nil {
			if j := prev.Index(c.Name); j >= 0 && prev.Columns[j].Type == typ {
				cd.Nullable = prev.Columns[j].Nullable
			}
		}
		inKey := c.Flags&1 != 0
		if full {
			j := -1
			if prev != nil {
				j = prev.Index(c.Name)
			}
			inKey = j >= 0 && prev.Columns[j].KeyPos > 0
		}
		if inKey {
			keyCols = append(keyCols, i)
		}
		def.Columns = append(def.Columns, cd)
	}
	// Key order: the previous definition's, else column order.
	slices.SortStableFunc(keyCols, func(a, b int) int {
		pa, pb := 0, 0
		if prev != nil {
			if j := prev.Index(def.Columns[a].Name); j >= 0 {
				pa = prev.Columns[j].KeyPos
			}
			if j := prev.Index(def.Columns[b].Name); j >= 0 {
				pb = prev.Columns[j].KeyPos
			}
		}
		if pa == 0 || pb == 0 {
			return a - b
		}
		return pa - pb
	})
	for pos, i := range keyCols {
		def.Columns[i].KeyPos = pos + 1
	}
	return def, nil
}

func sameColumns(a, b *source.TableDef) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Type != y.Type || x.KeyPos != y.KeyPos {
			return false
		}
	}
	return true
}

// describeChange writes a schema change as the ALTER TABLE that makes it:
// pgoutput carries the new columns, not the statement.
func describeChange(table string, from, to *source.TableDef, defaults map[string]string) string {
	var parts []string
	for _, c := range from.Columns {
		if to.Index(c.Name) < 0 {
			parts = append(parts, "DROP COLUMN "+quoteIdent(c.Name))
		}
	}
	for _, c := range to.Columns {
		j := from.Index(c.Name)
		switch {
		case j < 0:
			add := fmt.Sprintf("ADD COLUMN %s %s", quoteIdent(c.Name), c.Type)
			if v, ok := defaults[c.Name]; ok {
				add += " DEFAULT " + quoteLiteral(v)
			}
			parts = append(parts, add)
		case from.Columns[j].Type != c.Type:
			parts = append(parts, fmt.Sprintf("ALTER COLUMN %s TYPE %s", quoteIdent(c.Name), c.Type))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "-- primary key changed")
	}
	return fmt.Sprintf("ALTER TABLE %s %s", quoteQualified(table), strings.Join(parts, ", "))
}

// missingValues are the values rows that existed before a column was
// added have in it (PostgreSQL's attmissingval: the constant DEFAULT of
// the ADD COLUMN), by column, for the columns to adds. A consumer that
// applies the change gives them to its older rows, as PostgreSQL did.
// Best effort: a column dropped or changed since has none.
func (s *Stream) missingValues(ctx context.Context, table string, from, to *source.TableDef) map[string]string {
	out := map[string]string{}
	for _, c := range to.Columns {
		if from.Index(c.Name) >= 0 {
			continue
		}
		var v *string
		err := s.cat.conn.QueryRow(ctx, `SELECT (attmissingval::text::text[])[1] FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2 AND atthasmissing AND NOT attisdropped`, quoteQualified(table), c.Name).Scan(&v)
		if err == nil && v != nil {
			out[c.Name] = *v
		}
	}
	return out
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// row decodes one row change into the open transaction.
func (s *Stream) row(relID uint32, op source.Op, newTuple, oldTuple *pglogrepl.TupleData) error {
	rel, ok := s.rels[relID]
	if !ok {
		return fmt.Errorf("pgoutput sent a row of relation %d before its definition", relID)
	}
	// A row is written under the schema it was decoded with: the
	// table's, or a change earlier in the transaction.
	st := s.tables[rel.table]
	def, version, since := st.Def, st.Version, st.Since
	if d := s.pendingDDL(rel.table); d != nil {
		def, version, since = d.Def, d.SchemaVersion, d.CommitTs
	}
	e := source.Event{Kind: source.KindDML, Table: rel.table, Def: def, Op: op, CommitTs: s.rowsTs(), SchemaVersion: version, TableVersion: since}
	var err error
	if newTuple != nil {
		if e.New, err = values(newTuple, len(def.Columns)); err != nil {
			return err
		}
	}
	if oldTuple != nil {
		if e.Old, err = values(oldTuple, len(def.Columns)); err != nil {
			return err
		}
	}
	if op == source.OpDelete && e.Old == nil {
		return fmt.Errorf("a delete of %s came without its key; the table needs a primary key or REPLICA IDENTITY FULL", rel.table)
	}
	key, err := keyOf(def, e.Image())
	if err != nil {
		return fmt.Errorf("row of %s: %w", rel.table, err)
	}
	e.Key = key
	if op == source.OpUpdate && e.Old != nil {
		// PostgreSQL sends the old key of an update only when the key
		// changed. The row then moves to another key, maybe another
		// partition: it is a delete of the old key and an insert of the
		// new one, so each key's history stays whole in its partition.
		oldKey, err := keyOf(def, e.Old)
		if err == nil && oldKey != key {
			del, ins := e, e
			del.Op, del.Key, del.New = source.OpDelete, oldKey, nil
			ins.Op, ins.Old = source.OpInsert, nil
			s.add(del)
			s.add(ins)
			return nil
		}
	}
	s.add(e)
	return nil
}

func (s *Stream) add(e source.Event) {
	s.rows = append(s.rows, e)
	s.size += e.Size()
}

// values turns a tuple into values in column order. An old tuple of an
// update or delete under the default replica identity holds only the key
// columns: the others are sent as NULL, which is all the upstream told.
func values(t *pglogrepl.TupleData, n int) ([]source.Value, error) {
	if len(t.Columns) != n {
		return nil, fmt.Errorf("a row has %d columns, its table definition %d", len(t.Columns), n)
	}
	out := make([]source.Value, n)
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			out[i] = source.Null
		case pglogrepl.TupleDataTypeToast:
			out[i] = source.Value{Unchanged: true}
		case pglogrepl.TupleDataTypeText:
			out[i] = source.Text(string(c.Data))
		default:
			return nil, errors.New("pgoutput sent a binary value; the stream is requested in text")
		}
	}
	return out, nil
}

// keyOf is a row's primary key as partitions route it: the key columns'
// values in key order, encoded so that keys compare in their natural
// order (model.EncodeKeyValues).
func keyOf(def *source.TableDef, row []source.Value) (string, error) {
	names := def.KeyNames()
	parts := make([]string, len(names))
	for i, n := range names {
		v := row[def.Index(n)]
		if v.Null || v.Unchanged {
			return "", fmt.Errorf("key column %s has no value", n)
		}
		parts[i] = v.Text
	}
	return model.EncodeKeyValues(keyTypes(def), parts)
}

// keyTypes names a table's key column types, without modifiers, as
// spans carry them ("int8", "text,int4").
func keyTypes(def *source.TableDef) string {
	names := def.KeyNames()
	if len(names) == 0 {
		return model.NoKey
	}
	types := make([]string, len(names))
	for i, n := range names {
		t := def.Columns[def.Index(n)].Type
		if j := strings.IndexByte(t, '('); j >= 0 {
			t = t[:j]
		}
		types[i] = t
	}
	return strings.Join(types, ",")
}
