package mysql

import (
	"slices"
	"strings"
)

// A session's temporary table may have the name of a replicated table,
// and hide it from the session's statements: a session writing
// statements (binlog_format STATEMENT or MIXED) has the server log its
// CREATE TEMPORARY TABLE orders (…), then TRUNCATE orders, ALTER TABLE
// orders …, DROP TABLE orders, all of them the temporary table's. Read
// as the replicated table's, they emptied it in the sink, changed its
// schema history or ended it. The reader keeps each session's temporary
// tables, by the query events' thread id, from their creation to their
// drop (the server logs one at the session's end), and passes over the
// statements that change only those. A session writing rows has none of
// them logged.
//
// Wherever it cannot tell, the statement is the replicated table's, as
// before: only the sessions of the server read are kept (a replica's log
// carries other servers' thread ids, which may be the same numbers); a
// name is forgotten generously (in any letter case where the server
// folds names, at a rename it cannot read) and hides exactly; all are
// forgotten when the server starts again (a new file's format
// description written at its start: it has no temporary table, and
// gives its sessions' ids again).

// temporaries are the temporary tables of each session of the server
// read, by thread id, as the changefeed names tables (db.t).
type temporaries struct {
	server uint32 // the server's id: only its sessions' events
	folds  bool   // the server folds table names' letter case
	tables map[uint32][]string
}

// note records what a statement of thread (on server) does to its
// temporary tables: created or dropped. It reports whether the statement
// was one of those.
func (tt *temporaries) note(server, thread uint32, stmt, db string) bool {
	if !temporaryTable(stmt) {
		return false
	}
	if name, _, temporary, ok := createdTable(withoutComments(stmt), db); ok && temporary {
		if server == tt.server && !slices.Contains(tt.tables[thread], name) {
			tt.tables[thread] = append(tt.tables[thread], name)
		}
		return true
	}
	if names, ok := droppedTables(withoutTemporary(stmt), db); ok {
		tt.forget(thread, names...)
	}
	return true
}

// forget drops names from thread's temporary tables, in any letter case
// where the server folds them.
func (tt *temporaries) forget(thread uint32, names ...string) {
	tt.tables[thread] = slices.DeleteFunc(tt.tables[thread], func(t string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return n == t || tt.folds && strings.EqualFold(n, t) })
	})
	if len(tt.tables[thread]) == 0 {
		delete(tt.tables, thread)
	}
}

// hides says whether a schema statement of thread (on server) changes
// only its temporary tables: a TRUNCATE, DROP TABLE, ALTER TABLE or
// RENAME TABLE of them.
func (tt *temporaries) hides(server, thread uint32, stmt, db string) bool {
	mine := tt.tables[thread]
	if server != tt.server || len(mine) == 0 {
		return false
	}
	q := withoutComments(stmt)
	if t, ok := truncated(q, db); ok {
		return slices.Contains(mine, t)
	}
	if names, ok := droppedTables(q, db); ok {
		all := !slices.ContainsFunc(names, func(t string) bool { return !slices.Contains(mine, t) })
		tt.forget(thread, names...) // dropped, or no longer what it hid
		return all
	}
	if pairs, ok := renamedTables(q, db); ok {
		all := true
		for _, p := range pairs {
			if i := slices.Index(tt.tables[thread], p[0]); i >= 0 && all {
				tt.tables[thread][i] = p[1] // still the session's
			} else {
				all = false
			}
		}
		if !all {
			for _, p := range pairs {
				tt.forget(thread, p[0], p[1])
			}
		}
		return all
	}
	if a, ok := parseAlter(q, db); ok && slices.Contains(mine, a.table) {
		if a.renamed {
			if a.renamedTo == "" {
				tt.forget(thread, a.table) // renamed to what it cannot read
				return false
			}
			mine[slices.Index(mine, a.table)] = a.renamedTo // still the session's
		}
		return true
	}
	return false
}

// writesOnly says whether a row-changing statement of thread (on server)
// writes only its temporary tables (of those the changefeed replicates
// by name).
func (tt *temporaries) writesOnly(server, thread uint32, stmt, db string, tables map[string]tableState) bool {
	mine := tt.tables[thread]
	if server != tt.server || len(mine) == 0 || callsFunction(stmt) {
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

// temporaryTable says whether a statement creates or drops a session's
// temporary table (CREATE [OR REPLACE] TEMPORARY TABLE; DROP /*!40005
// TEMPORARY */ TABLE as the server writes the drop of one at a
// session's end).
func temporaryTable(stmt string) bool {
	f := strings.Fields(withoutComments(stmt))
	if len(f) < 3 || !strings.EqualFold(f[0], "create") && !strings.EqualFold(f[0], "drop") {
		return false
	}
	if len(f) > 4 && strings.EqualFold(f[1], "or") && strings.EqualFold(f[2], "replace") {
		f = f[2:] // CREATE OR REPLACE TEMPORARY TABLE (MariaDB)
	}
	return strings.EqualFold(f[1], "temporary") || len(f) > 3 && strings.HasPrefix(f[1], "/*!") && strings.EqualFold(f[2], "temporary")
}
