package mysql

import (
	"strconv"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// commit ends the current transaction at ev, an event that commits it:
// the schema changes prepared XA transactions carried, the tables its
// row statements wrote held, its schema statement dealt with
// (statement), the tables reset, then its events appended to the log
// at its timestamp (or the log resolved to it), and its end made the
// new position and a point. An error ends the reader.
func (r *streamRun) commit(ev *replication.BinlogEvent) error {
	if len(r.carried) > 0 && r.cur.base == 0 {
		r.cur.prepend(r.carried)
		r.carried = nil
	}
	if r.cur.commit == 0 {
		r.cur.commit = int64(ev.Header.Timestamp) * 1_000_000
	}
	ts := max(r.at.Ts+1, model.TsFromMicros(max(r.cur.commit, r.cur.tickAt)))
	if r.cur.base != 0 {
		ts = r.cur.base // fixed at its first part
	}
	for _, rs := range r.cur.rowStmts {
		for _, t := range writtenTables(rs[0], rs[1], r.at.Tables) {
			if t = r.named(t); r.joined(t, ts) && !r.held[t] && !r.at.Tables[t].Dropped {
				r.h.hold(t, rowsReason(rs[0]))
			}
		}
	}
	if r.cur.stmt != "" {
		r.statement(ts)
	}
	if r.cur.base == 0 { // a parted transaction's were made at its first part
		var reset []*source.Event
		if r.at.Tables, reset = resets(r.at.Tables, r.held, ts, r.inCopy); len(reset) > 0 {
			r.cur.prepend(reset)
		}
	}
	// Each schema change of a table at its own position (slots.go),
	// then the rows: a table's rows after its change carry the change's
	// position as their table version.
	ts = r.cur.settle(&r.at, ts)
	if again := r.cur.copiesAgain(r.at.Tables); len(again) > 0 {
		if err := r.p.markAgain(r.ctx, &r.markDB, again, r.at.Tables); err != nil {
			return err
		}
	}
	if err := r.write(ev, ts); err != nil {
		return err
	}
	r.at = position{File: r.file, Pos: ev.Header.LogPos, GTID: r.passed.String(), Server: r.srv.ServerID, Ts: ts, Tables: r.at.Tables}
	if len(r.prepared) == 0 {
		r.p.mu.Lock()
		r.p.points = append(r.p.points, r.at)
		if len(r.p.points) > maxPoints {
			r.p.points = append(r.p.points[:0], r.p.points[len(r.p.points)-maxPoints/2:]...)
		}
		r.p.resumes = thinned(append(r.p.resumes, r.at))
		r.p.mu.Unlock()
	}
	r.cur = txn{}
	return nil
}

// write appends the current transaction, committed at ev, to the log
// at ts: its schema changes, its rows and its summary; the log is
// resolved to ts when it has none.
func (r *streamRun) write(ev *replication.BinlogEvent, ts model.Ts) error {
	out := r.cur.events // most transactions change rows only: not copied
	if len(r.cur.ddls) > 0 {
		out = make([]source.Event, 0, len(r.cur.ddls)+len(r.cur.events))
		for _, d := range r.cur.ddls {
			out = append(out, *d)
		}
		out = append(out, r.cur.events...)
	}
	if r.cur.base != 0 || hasRows(r.cur.events) {
		// Its id here, for a log that keeps transaction boundaries:
		// its GTID, else where it commits in the binary log.
		id := r.cur.gtid
		if id == "" {
			id = r.file + ":" + strconv.FormatUint(uint64(ev.Header.LogPos), 10)
		}
		out = append(out, source.Event{Kind: source.KindTxn, CommitTs: ts, Txn: &source.TxnSummary{SourceID: id}})
	}
	if len(out) > 0 {
		if err := r.w.Append(out); err != nil {
			return err
		}
		if cap(out) <= maxSpare {
			clear(out)
			r.spare = out[:0]
		}
	} else {
		r.w.Resolve(ts)
	}
	return nil
}

// joined reports whether a statement committed at ts is past where
// table t joined the changefeed. A statement at or before where a
// table joined the changefeed (its Since; a table added, where the
// binary log ended then) is history the table's schema and copy
// already hold.
func (r *streamRun) joined(t string, ts model.Ts) bool {
	st, ok := r.at.Tables[t]
	return ok && ts > st.Since && !r.inCopy(st)
}
