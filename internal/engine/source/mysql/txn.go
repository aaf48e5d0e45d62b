package mysql

import (
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
	// reserved are positions of schema changes looked for at its rows
	// and not found (the table's schema the same, or the table held):
	// the catalog, read again later from before them, may find one,
	// and the positions after them are the same either way (settle).
	reserved int
	// hadRows: rows of a replicated table came, held ones too; seen
	// counts them since its last part (size, their bytes), and marked
	// says a watermark came, any table's.
	hadRows bool
	seen    int
	marked  bool
	events  []source.Event
	tickAt  int64 // the server's clock in µs, when it wrote a tick
	commit  int64 // the commit's time in µs (MySQL) or seconds × 10^6
	gtid    string
	xa      string // an XA transaction's id, from its XA END
	// xaStart: an XA transaction (its XA START, or MariaDB's GTID flag),
	// known before its rows: they wait for its outcome, never in parts.
	xaStart bool
	began   uint32 // the header time of its GTID event, in seconds
	// file and pos: where its GTID event ends in the binary log of the
	// server read.
	file string
	pos  uint32
	size int // the bytes of the rows events its events came from
	// A transaction written to the log in parts (below): its first
	// position, and how many of its schema changes are placed.
	base   model.Ts
	placed int
	// before are the tables as the transaction began (again.go).
	before map[string]tableState
}

// A large transaction is not held in memory whole: once its rows pass
// partRows or partBytes (of the binary log's rows events) they go to the
// event log, on disk, as a part, and so on until its commit. The binary
// log writes a transaction's events together at its commit, so nothing
// else commits while they are read, and the transaction's positions can
// be fixed at its first part: its schema changes (a table's change met
// at its first row, the reset of a table added back) take base, base+1,
// …, its rows base+ddlSlots. Readers see none of it until the commit
// resolves the log past it. A prepared XA transaction's rows still wait
// in memory for its outcome (xa.go): they may be dropped.
const (
	partRows  = 4096
	partBytes = 4 << 20
	// maxSpare bounds the array of events kept from one transaction for
	// the next (a part's worth and its growth; a larger one, of a
	// transaction not parted, is let go).
	maxSpare = 2 * partRows
	// ddlSlots is how many schema changes a parted transaction may carry
	// (one per table at most: the tables it writes); a table whose change
	// would be beyond them is held.
	ddlSlots = 1024
)

// partDue says the transaction's rows are to go out as a part: past the
// bounds, and nothing in it that must wait for its commit (a watermark,
// an XA transaction's rows) or has no position left (more schema changes
// than ddlSlots, met before its first part: it stays in memory).
func (cur *txn) partDue() bool {
	if cur.seen < partRows && cur.size < partBytes || cur.xa != "" || cur.xaStart || cur.marked || len(cur.ddls) >= ddlSlots {
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
			cur.ddls = append(reset, cur.ddls...)
		}
	}
	cur.place(at)
	if err := w.AppendPart(cur.events); err != nil {
		return err
	}
	cur.events, cur.size, cur.seen = nil, 0, 0 // the log has them; a new array for the next part
	return nil
}

// place gives a parted transaction's schema changes not placed yet their
// positions and puts the rows read so far at the rows' position.
func (cur *txn) place(at *position) {
	for ; cur.placed < len(cur.ddls); cur.placed++ {
		cur.version(at, cur.ddls[cur.placed], cur.base+model.Ts(cur.placed))
	}
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

// rowsTs is a parted transaction's rows' position.
func (cur *txn) rowsTs() model.Ts { return cur.base + ddlSlots }

// slotsFull says a parted transaction has no position left for another
// schema change.
func (cur *txn) slotsFull() bool { return cur.base != 0 && len(cur.ddls) >= ddlSlots }

// settle gives the transaction's schema changes and rows their positions
// at its commit at ts, each change a position of its own before the rows
// (a parted transaction's were fixed at its first part), and returns the
// rows' position.
func (cur *txn) settle(at *position, ts model.Ts) model.Ts {
	if cur.base != 0 {
		cur.place(at)
		return cur.rowsTs()
	}
	// The positions reserved first, then the changes found, then the
	// rows: where they are is the same whichever changes were found and
	// whichever of its tables held (their rows dropped). A transaction
	// without rows ends at its last change's position.
	rows := len(cur.events) > 0 || cur.hadRows
	for i := 0; i < cur.reserved; i++ {
		if i < cur.reserved-1 || len(cur.ddls) > 0 || rows {
			ts++
		}
	}
	for i, d := range cur.ddls {
		cur.version(at, d, ts)
		if i < len(cur.ddls)-1 || rows {
			ts++
		}
	}
	cur.rowsAt(ts)
	return ts
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
	if strings.EqualFold(q, "BEGIN") {
		return true
	}
	f := strings.Fields(q)
	switch {
	case len(f) >= 2 && strings.EqualFold(f[0], "SAVEPOINT"):
		return true
	case len(f) >= 3 && strings.EqualFold(f[0], "RELEASE") && strings.EqualFold(f[1], "SAVEPOINT"):
		return true
	case len(f) >= 3 && strings.EqualFold(f[0], "ROLLBACK") && strings.EqualFold(f[1], "TO"):
		// ROLLBACK TO [SAVEPOINT] s1 (the server has dropped the rows it
		// undid from what it logs).
		return true
	case len(f) >= 4 && strings.EqualFold(f[0], "ROLLBACK") && strings.EqualFold(f[1], "WORK") && strings.EqualFold(f[2], "TO"):
		return true
	}
	return false
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
