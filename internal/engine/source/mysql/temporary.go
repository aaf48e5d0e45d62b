package mysql

import (
	"slices"
	"strings"
)

// A session's temporary table may have the name of a replicated table,
// and hide it from the session's statements: a session writing
// statements (binlog_format STATEMENT or MIXED) has the server log its
// CREATE TEMPORARY TABLE orders (…), then TRUNCATE orders,
// ALTER TABLE orders …, DROP TABLE orders, all of them the temporary
// table's. Read as the replicated table's, they emptied it in the sink,
// changed its schema history or ended it. The reader keeps each
// session's temporary tables (by the query events' thread id) from
// their creation to their drop (the server logs one at the session's
// end), and passes over the statements that change only those. A
// session writing rows has none of them logged. After a new binary log
// file's format description (a server started again, or a rotation)
// they are forgotten: a server started again has no temporary table and
// gives its sessions' ids again.

// temporaries are the temporary tables of each session, by its thread
// id, as the changefeed names tables (db.t).
type temporaries map[uint32][]string

// note records what a statement of thread does to its temporary tables:
// created or dropped. It reports whether the statement was one of those.
func (tt temporaries) note(thread uint32, stmt, db string) bool {
	if !temporaryTable(stmt) {
		return false
	}
	if name, _, temporary, ok := createdTable(withoutComments(stmt), db); ok && temporary {
		if !slices.Contains(tt[thread], name) {
			tt[thread] = append(tt[thread], name)
		}
		return true
	}
	if names, ok := droppedTables(withoutTemporary(stmt), db); ok {
		tt[thread] = slices.DeleteFunc(tt[thread], func(t string) bool { return slices.Contains(names, t) })
		if len(tt[thread]) == 0 {
			delete(tt, thread)
		}
	}
	return true
}

// hides says whether a schema statement of thread changes only its
// temporary tables: a TRUNCATE, DROP TABLE or ALTER TABLE of one.
func (tt temporaries) hides(thread uint32, stmt, db string) bool {
	mine := tt[thread]
	if len(mine) == 0 {
		return false
	}
	q := withoutComments(stmt)
	if t, ok := truncated(q, db); ok {
		return slices.Contains(mine, t)
	}
	if names, ok := droppedTables(q, db); ok {
		for _, t := range names {
			if !slices.Contains(mine, t) {
				return false
			}
		}
		// Dropped: no longer the session's.
		tt[thread] = slices.DeleteFunc(mine, func(t string) bool { return slices.Contains(names, t) })
		return true
	}
	if a, ok := parseAlter(q, db); ok && slices.Contains(mine, a.table) {
		if a.renamed {
			if a.renamedTo == "" {
				return false // renamed to what it cannot read: held, as before
			}
			mine[slices.Index(mine, a.table)] = a.renamedTo // still the session's
		}
		return true
	}
	return false
}

// withoutTemporary is a DROP [/*!40005] TEMPORARY [*/] TABLE statement
// as a DROP TABLE.
func withoutTemporary(stmt string) string {
	f := strings.Fields(withoutComments(stmt))
	out := f[:0:0]
	for i, w := range f {
		switch {
		case i == 1 && strings.HasPrefix(w, "/*!"), strings.EqualFold(w, "temporary") && len(out) <= 2, w == "*/" && len(out) <= 2:
			continue
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

// writesOnly says whether a row-changing statement of thread writes only
// its temporary tables (of those the changefeed replicates by name).
func (tt temporaries) writesOnly(thread uint32, stmt, db string, tables map[string]tableState) bool {
	mine := tt[thread]
	if len(mine) == 0 || callsFunction(stmt) {
		return false
	}
	written := writtenTables(stmt, db, tables)
	for _, t := range written {
		if !slices.Contains(mine, t) {
			return false
		}
	}
	return len(written) > 0
}
