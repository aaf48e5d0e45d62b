package mysql

// Row changes the binary log holds as statements (a session with
// binlog_format STATEMENT or MIXED): which they are, what tables they
// may have written, and why those are held.

import (
	"maps"
	"slices"
	"strings"
)

// rowsStatement says whether a statement changes rows (INSERT, REPLACE,
// UPDATE, DELETE, LOAD DATA): the binary log holds one as a statement,
// not as rows events, when the session that wrote it had binlog_format
// STATEMENT or MIXED. The rows it changed are in no rows event: nothing
// of them can reach the sink.
func rowsStatement(stmt string) bool {
	f := strings.Fields(strings.ToLower(withoutComments(stmt)))
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "insert", "replace", "update", "delete", "load", "with":
		// (WITH … UPDATE or DELETE: a WITH … SELECT is never logged.)
		return true
	case "select", "do":
		// A stored function that wrote rows, called by a SELECT, a DO
		// or a SET (the server logs each as SELECT `db`.`f`(…)): a
		// SELECT that wrote nothing is never logged.
		return true
	}
	return false
}

// callsFunction says whether a row-changing statement is a stored
// function's call (SELECT `db`.`f`(…)): what it wrote the statement
// does not name.
func callsFunction(stmt string) bool {
	f := strings.Fields(strings.ToLower(withoutComments(stmt)))
	return len(f) > 0 && (f[0] == "select" || f[0] == "do")
}

// rowsReason says why a table a row-changing statement wrote is held.
func rowsReason(stmt string) string {
	if callsFunction(stmt) {
		return "a stored function that writes rows was called by a statement the binary log holds as a statement, not as rows (" + stmt +
			"), and which tables it wrote the binary log does not say: every table of the changefeed is held. The session that ran it had binlog_format STATEMENT, and the sink lacks what the function wrote. Make every session write rows (SET GLOBAL binlog_format = ROW, then reconnect the application's connections, which keep the format they began with)"
	}
	return "its rows were changed by a statement the binary log holds as a statement, not as rows (" + stmt +
		"): the session that ran it had binlog_format STATEMENT or MIXED, and the sink lacks that change. Make every session write rows (SET GLOBAL binlog_format = ROW, then reconnect the application's connections, which keep the format they began with)"
}

// writtenTables are the tables a row-changing statement (db is its
// default database) may have written: an INSERT's or REPLACE's one, else
// every replicated table it names, read or written (holding one for
// nothing is seen and resumed; missing one loses its rows).
//
// A stored function's call may have written any of them: all are
// returned.
func writtenTables(stmt, db string, tables map[string]tableState) []string {
	if callsFunction(stmt) {
		return slices.Sorted(maps.Keys(tables))
	}
	f := strings.Fields(withoutComments(stmt))
	if len(f) > 1 && (strings.EqualFold(f[0], "insert") || strings.EqualFold(f[0], "replace")) {
		rest := f[1:]
		for len(rest) > 1 && slices.Contains([]string{"low_priority", "delayed", "high_priority", "ignore", "into"}, strings.ToLower(rest[0])) {
			rest = rest[1:]
		}
		name := rest[0]
		if i := strings.IndexByte(name, '('); i > 0 && !strings.Contains(name[:i], "`") {
			name = name[:i] // INSERT INTO t(a, b)
		}
		if t, ok := qualifiedName(name, db); ok {
			return []string{t} // (not one of ours: passed over by the caller)
		}
	}
	return namedTables(stmt, db, tables)
}
