package mysql

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// query handles a query event: an XA verb, a savepoint, a COMMIT or
// ROLLBACK, a statement that writes rows (its tables held at the
// commit) or a schema statement (dealt with at its commit). It reports
// whether the event is done with: nothing commits at it. An error ends
// the reader.
func (r *streamRun) query(h *replication.EventHeader, e *replication.QueryEvent) (done bool, err error) {
	if r.cur.before == nil {
		r.cur.before = r.at.Tables
	}
	q := strings.TrimSpace(string(e.Query))
	verb, xid := xaStatement(q)
	switch sv, name := savepointStatement(q); sv {
	case "SAVEPOINT":
		r.cur.setSavepoint(name)
	case "RELEASE":
		r.cur.release(name)
	case "ROLLBACK":
		if found, err := r.cur.rollbackTo(name, r.w); err != nil {
			return true, err
		} else if !found {
			r.p.log.Warn("mysql source: a rollback to a savepoint the transaction did not set; its rows are kept", "changefeed", r.p.cf, "savepoint", name)
		}
	}
	if strings.EqualFold(q, "BEGIN") {
		r.cur.group = true // MySQL's; MariaDB's GTID event says it
	}
	switch {
	case inTransaction(q), verb == "START":
		r.cur.xaStart = r.cur.xaStart || verb == "START"
		return true, nil
	case verb == "END":
		// Its prepare follows, or (MySQL) its one-phase commit.
		r.cur.xa = xid
		return true, nil
	case verb == "COMMIT" || verb == "ROLLBACK":
		if pending, ok := r.prepared[xid]; ok {
			delete(r.prepared, xid)
			if verb == "COMMIT" {
				r.cur.events = append(r.cur.events, pending.events...)
			}
		} else if verb == "ROLLBACK" {
			// Rolled back before it was prepared, its group written
			// whole (it changed a table that cannot roll back): its
			// rows never were.
			if _, err := r.cur.rollbackTo("", r.w); err != nil {
				return true, err
			}
		} else if verb == "COMMIT" && len(r.cur.events) == 0 && !strings.HasSuffix(strings.ToUpper(q), " ONE PHASE") {
			// (A one-phase commit was never prepared: one of no
			// replicated table's has no rows here, rightly.)
			r.p.log.Warn("mysql source: an XA transaction prepared before the position this reader started from commits here; its rows were written before that position and are not read (create changefeeds while no XA transaction is prepared: XA RECOVER lists them)",
				"changefeed", r.p.cf, "xid", xid)
		}
	case strings.EqualFold(q, "COMMIT"):
	case strings.EqualFold(q, "ROLLBACK"):
		// A transaction that changed a table that cannot roll back (a
		// session's temporary table, written as statements) is written
		// whole, then ROLLBACK: its rows never were. (The changes of a
		// table that cannot roll back come as transactions of their
		// own, before it.)
		if _, err := r.cur.rollbackTo("", r.w); err != nil {
			return true, err
		}
	case r.temps.note(h.ServerID, e.SlaveProxyID, q, string(e.Schema)) && r.cur.group:
		// A session's temporary table created or dropped inside a
		// transaction (a session writing statements, MIXED or
		// STATEMENT): no end of it, and no table of the changefeed's.
		// Taken for its end, the rows before it were committed, and a
		// ROLLBACK after it (which the server then writes) came too late.
		return true, nil
	case r.temps.hides(h.ServerID, e.SlaveProxyID, q, string(e.Schema)):
		// A TRUNCATE, DROP or ALTER of the session's temporary table
		// under a replicated table's name (temporary.go): nothing of
		// the changefeed's. Its own transaction, unless a transaction
		// holds it (a temporary table's change ends none).
		return r.cur.group, nil
	case rowsStatement(q):
		// Part of its transaction; the tables it wrote are held
		// at the commit (not the session's temporary tables).
		if !r.temps.writesOnly(h.ServerID, e.SlaveProxyID, q, string(e.Schema), r.at.Tables) {
			r.cur.rowStmts = append(r.cur.rowStmts, [2]string{q, string(e.Schema)})
		}
		return true, nil
	default:
		// A schema change, its own transaction: dealt with at its
		// commit (statement.go, from commit.go), where its position is known.
		r.cur.stmt, r.cur.stmtDB = q, string(e.Schema)
	}
	return false, nil
}
