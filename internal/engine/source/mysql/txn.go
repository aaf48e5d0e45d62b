package mysql

import (
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// txn is the transaction the puller is reading.
type txn struct {
	// stmt is its schema change statement, if it is one; stmtDB, the
	// statement's default database.
	stmt, stmtDB string
	// rowStmts are row changes it holds as statements (rowsStatement),
	// each with its default database.
	rowStmts [][2]string
	ddls     []*source.Event // schema changes its rows follow (schema.go)
	// seen counts the rows of replicated tables, held ones too, since
	// its last part (size, their bytes), and marked says a watermark
	// came, any table's.
	seen   int
	marked bool
	events []source.Event
	tickAt int64 // the server's clock in µs, when it wrote a tick
	commit int64 // the commit's time in µs (MySQL) or seconds × 10^6
	gtid   string
	xa     string // an XA transaction's id, from its XA END
	// xaStart: an XA transaction (its XA START, or MariaDB's GTID flag),
	// known before its rows: they wait for its outcome, never in parts.
	xaStart bool
	// group: the transaction's events end with a COMMIT, a ROLLBACK or
	// an XID (a BEGIN began it; MariaDB's GTID event is not standalone):
	// its statements are not each a transaction.
	group bool
	began uint32 // the header time of its GTID event, in seconds
	// file and pos: where its GTID event ends in the binary log of the
	// server read.
	file string
	pos  uint32
	size int // the bytes of the rows events its events came from
	// A transaction written to the log in parts (below): its first
	// position.
	base model.Ts
	// before are the tables as the transaction began (again.go).
	before map[string]tableState
	// parted counts the rows its parts sent to the log; savepoints are
	// those it set, in order (rollbackTo).
	parted     int
	savepoints []savepoint
}

// savepoint is a point a transaction can roll back to: its name, and how
// many events the transaction had there (its parts' rows and those
// held).
type savepoint struct {
	name string
	at   int
}

// A large transaction is not held in memory whole: once its rows pass
// partRows or partBytes (of the binary log's rows events) they go to the
// event log, on disk, as a part, and so on until its commit. The binary
// log writes a transaction's events together at its commit, so nothing
// else commits while they are read, and the transaction's positions can
// be fixed at its first part: its schema changes (a table's change met
// at its first row, the reset of a table added back) take their slots
// from base on (slots.go), its rows base+ddlSlots. Readers see none of it until the commit
// resolves the log past it. A prepared XA transaction's rows still wait
// in memory for its outcome (xa.go): they may be dropped.
const (
	partRows  = 4096
	partBytes = 4 << 20
	// maxSpare bounds the array of events kept from one transaction for
	// the next (a part's worth and its growth; a larger one, of a
	// transaction not parted, is let go).
	maxSpare = 2 * partRows
	// ddlSlots is how many positions a transaction has for its schema
	// changes, before its rows' (slots.go).
	ddlSlots = 1024
)

// partDue says the transaction's rows are to go out as a part: past the
// bounds, and nothing in it that must wait for its commit (a watermark,
// an XA transaction's rows).
func (cur *txn) partDue() bool {
	if cur.seen < partRows && cur.size < partBytes || cur.xa != "" || cur.xaStart || cur.marked {
		return false
	}
	for i := range cur.events {
		if cur.events[i].Kind != source.KindDML {
			return false
		}
	}
	return true
}

// part writes the transaction's rows so far to the log as a part, fixing
// its positions at the first (after the resume point at, from the commit
// time the transaction began with: MySQL's GTID event carries it,
// MariaDB's its second; now, the time of the event being read).
func (cur *txn) part(at *position, held map[string]bool, now uint32, w source.LogWriter, inCopy func(tableState) bool) error {
	if cur.base == 0 {
		began := cur.commit
		if began == 0 {
			began = int64(cur.began) * 1_000_000
		}
		if began == 0 {
			began = int64(now) * 1_000_000
		}
		cur.base = max(at.Ts+1, model.TsFromMicros(max(began, cur.tickAt)))
		var reset []*source.Event
		if at.Tables, reset = resets(at.Tables, held, cur.base, inCopy); len(reset) > 0 {
			cur.prepend(reset)
		}
	}
	cur.place(at)
	if err := w.AppendPart(cur.events); err != nil {
		return err
	}
	cur.parted += len(cur.events)
	cur.events, cur.size, cur.seen = nil, 0, 0 // the log has them; a new array for the next part
	return nil
}

// place gives a parted transaction's schema changes their positions and
// puts the rows read so far at the rows' position.
func (cur *txn) place(at *position) {
	cur.placeAll(at, cur.base)
	cur.rowsAt(cur.rowsTs())
}

// version puts schema change d at ts and makes it its table's version.
func (cur *txn) version(at *position, d *source.Event, ts model.Ts) {
	d.CommitTs, d.TableVersion = ts, ts
	st := at.Tables[d.Table]
	st.Since = ts
	at.Tables = withTable(at.Tables, d.Table, st)
}

// rowsAt puts the rows read so far at ts. Rows of a table the transaction
// changed the schema of are of the version the change begins: rows read
// before its commit brought a reset (a TRUNCATE of a table added back),
// and a parted transaction's read before its first part placed the
// changes, name the version before, which would make the sink describe
// the new one without them.
func (cur *txn) rowsAt(ts model.Ts) {
	var changed map[string]*source.Event
	for _, d := range cur.ddls {
		if changed == nil {
			changed = map[string]*source.Event{}
		}
		changed[d.Table] = d
	}
	for i := range cur.events {
		e := &cur.events[i]
		e.CommitTs = ts
		if d, ok := changed[e.Table]; ok {
			e.TableVersion, e.SchemaVersion = d.CommitTs, d.SchemaVersion
		}
	}
}

// rowsTs is the transaction's rows' position.
func (cur *txn) rowsTs() model.Ts { return cur.base + ddlSlots }

// settle gives the transaction's schema changes and rows their positions
// at its commit at ts, its base (a parted transaction's was fixed at its
// first part), and returns the rows' position: each change at the base
// plus its table's changes before it (slots.go), the rows base+ddlSlots
// whatever came before them, as a parted transaction's.
//
// Where the rows are is thus the binary log's alone, not the
// changefeed's tables': a read again from a resume point after the
// tables changed (a table copied again or added back is not joined
// before the change, one removed is not read at all, a TRUNCATE begins
// the first transaction after one added back) finds other schema changes
// than the first read did. With the rows just past the last change (as
// before 2026-12-07), every later transaction moved with them until the
// next tick, and a partition whose checkpoint was ahead of the
// changefeed's passed over the one that moved down onto its checkpoint:
// an update lost.
func (cur *txn) settle(at *position, ts model.Ts) model.Ts {
	if cur.base != 0 {
		ts = cur.base
	}
	cur.placeAll(at, ts)
	cur.rowsAt(ts + ddlSlots)
	return ts + ddlSlots
}

// commits says whether an event ends a transaction: an XID (InnoDB's
// commit), a COMMIT statement, or a statement that is its own
// transaction (a schema change).
func commits(ev *replication.BinlogEvent) bool {
	switch e := ev.Event.(type) {
	case *replication.XIDEvent:
		return true
	case *replication.QueryEvent:
		q := strings.TrimSpace(string(e.Query))
		return !inTransaction(q) && !rowsStatement(q)
	}
	return false
}

// inTransaction says whether a statement the binary log holds is part of
// the transaction around it, not its end: its BEGIN, and the savepoints
// an application (an ORM nesting its transactions) sets, rolls back to
// and releases, which the server logs between the rows. Taken for
// commits, they cut a transaction in two, and a resume point between the
// halves was past its GTID: the second half was never read again.
func inTransaction(q string) bool {
	verb, _ := savepointStatement(q)
	return verb != "" || strings.EqualFold(q, "BEGIN")
}

// savepointStatement parses a savepoint statement as the binary log
// holds it: verb SAVEPOINT, ROLLBACK (ROLLBACK [WORK] TO [SAVEPOINT]) or
// RELEASE (RELEASE SAVEPOINT), and the savepoint's name (unquoted);
// verb "" for any other statement.
func savepointStatement(q string) (verb, name string) {
	f := strings.Fields(q)
	word := func(i int, w string) bool { return len(f) > i && strings.EqualFold(f[i], w) }
	var rest int
	switch {
	case word(0, "SAVEPOINT"):
		verb, rest = "SAVEPOINT", 1
	case word(0, "RELEASE") && word(1, "SAVEPOINT"):
		verb, rest = "RELEASE", 2
	case word(0, "ROLLBACK") && word(1, "TO"):
		verb, rest = "ROLLBACK", 2
	case word(0, "ROLLBACK") && word(1, "WORK") && word(2, "TO"):
		verb, rest = "ROLLBACK", 3
	default:
		return "", ""
	}
	if verb == "ROLLBACK" && word(rest, "SAVEPOINT") && len(f) > rest+1 {
		rest++
	}
	if len(f) <= rest {
		return "", ""
	}
	// The name is the rest of the statement: quoted, it may hold spaces.
	name = strings.TrimSpace(q)
	for range rest {
		name = strings.TrimSpace(name[len(strings.Fields(name)[0]):])
	}
	if len(name) >= 2 && name[0] == '`' && name[len(name)-1] == '`' {
		name = strings.ReplaceAll(name[1:len(name)-1], "``", "`")
	}
	return verb, name
}

// setSavepoint sets a savepoint where the transaction is; one of the
// same name set before is gone (as the server does).
func (cur *txn) setSavepoint(name string) {
	cur.savepoints = slices.DeleteFunc(cur.savepoints, func(s savepoint) bool { return strings.EqualFold(s.name, name) })
	cur.savepoints = append(cur.savepoints, savepoint{name: name, at: cur.parted + len(cur.events)})
}

// release forgets a savepoint and those set after it.
func (cur *txn) release(name string) {
	if i := cur.savepointIndex(name); i >= 0 {
		cur.savepoints = cur.savepoints[:i]
	}
}

// rollbackTo undoes what the transaction did after a savepoint (name ""
// is its start: all of it): the server wrote those rows into the binary
// log, then ROLLBACK TO, because the transaction changed a table that
// cannot roll back (MyISAM, MEMORY); otherwise it takes them out of the
// log itself. Rows its parts sent already leave the log (w). The
// savepoint stays, those set after it are gone. False when the
// transaction has no such savepoint (set before the reader's start: it
// cannot be).
func (cur *txn) rollbackTo(name string, w source.LogWriter) (bool, error) {
	at := 0
	if name != "" {
		i := cur.savepointIndex(name)
		if i < 0 {
			return false, nil
		}
		at = cur.savepoints[i].at
		cur.savepoints = cur.savepoints[:i+1]
	} else {
		cur.savepoints = nil
	}
	if at < cur.parted {
		if err := w.TruncatePart(at); err != nil {
			return true, err
		}
		cur.parted = at
	}
	keep := at - cur.parted
	if keep < len(cur.events) {
		clear(cur.events[keep:]) // their values are not kept alive
		cur.events = cur.events[:keep]
	}
	return true, nil
}

func (cur *txn) savepointIndex(name string) int {
	for i := len(cur.savepoints) - 1; i >= 0; i-- {
		if strings.EqualFold(cur.savepoints[i].name, name) {
			return i
		}
	}
	return -1
}

// hasRows says a transaction's events include a row change.
func hasRows(evs []source.Event) bool {
	for i := range evs {
		if evs[i].Kind == source.KindDML {
			return true
		}
	}
	return false
}
