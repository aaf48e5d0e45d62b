package mysql

import (
	"regexp"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The statements the binary log carries besides rows, read for what they
// do to the replicated tables: which tables they name, create, drop,
// rename or empty, and whether what they change can be followed.

// followable says whether a statement naming a replicated table changes
// what its rows look like in a way the next row's table map shows: ALTER
// TABLE other than a rename, and index changes. A rename, a drop and
// anything else hold the table (a TRUNCATE is passed on: truncated).
func followable(stmt string) bool {
	low := strings.ToLower(strings.Join(strings.Fields(stmt), " "))
	switch {
	case strings.HasPrefix(low, "alter table"), strings.HasPrefix(low, "alter online table"), strings.HasPrefix(low, "alter ignore table"):
		return !strings.Contains(low, " rename ")
	case strings.HasPrefix(low, "create index"), strings.HasPrefix(low, "create unique index"), strings.HasPrefix(low, "drop index"),
		strings.HasPrefix(low, "analyze table"), strings.HasPrefix(low, "optimize table"):
		return true
	}
	return false
}

// bringsRowsIn says why a statement changes a table's rows without
// writing row events that bring rows in (ALTER TABLE … EXCHANGE
// PARTITION … WITH TABLE, IMPORT TABLESPACE): the sink would lack them.
// Those that only take rows away (DROP or TRUNCATE PARTITION: the
// retention of a time-partitioned table) are not held: the sink keeps
// those rows, as PostgreSQL's dropped partitions' (docs/mysql.md).
func bringsRowsIn(stmt string) string {
	low := " " + strings.ToLower(strings.Join(strings.Fields(stmt), " ")) + " "
	if !strings.HasPrefix(low, " alter ") {
		return ""
	}
	switch {
	case strings.Contains(low, " exchange partition "):
		return "its rows were exchanged with another table's upstream (" + stmt + "), which writes no row events: the sink lacks the rows that came in"
	case strings.Contains(low, " import ") && strings.Contains(low, " tablespace"):
		return "its rows were replaced upstream by an imported tablespace (" + stmt + "), which writes no row events: the sink lacks them"
	}
	return ""
}

// truncated names the table a TRUNCATE statement empties (db is the
// statement's default database); false for any other statement, or one
// whose table it cannot read exactly (which holds what it names instead:
// emptying the wrong table in the sink would lose rows).
func truncated(stmt, db string) (string, bool) {
	f := strings.Fields(stmt)
	if len(f) < 2 || !strings.EqualFold(f[0], "truncate") {
		return "", false
	}
	name := f[1]
	if strings.EqualFold(name, "table") {
		if len(f) != 3 {
			return "", false
		}
		name = f[2]
	} else if len(f) != 2 {
		return "", false
	}
	return qualifiedName(strings.TrimSuffix(name, ";"), db)
}

// droppedTables names the tables a DROP TABLE statement drops (db is the
// statement's default database; MariaDB logs the statement with a comment
// after it); false for any other statement, or one whose names it cannot
// read exactly (which holds what it names instead).
func droppedTables(stmt, db string) ([]string, bool) {
	if i := strings.Index(stmt, "/*"); i >= 0 {
		stmt = stmt[:i]
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(stmt), ";"))
	if len(f) < 3 || !strings.EqualFold(f[0], "drop") || !strings.EqualFold(f[1], "table") {
		return nil, false
	}
	f = f[2:]
	if len(f) > 2 && strings.EqualFold(f[0], "if") && strings.EqualFold(f[1], "exists") {
		f = f[2:]
	}
	if n := len(f); n > 1 && (strings.EqualFold(f[n-1], "restrict") || strings.EqualFold(f[n-1], "cascade")) {
		f = f[:n-1]
	}
	var out []string
	for _, name := range strings.Split(strings.Join(f, ""), ",") {
		t, ok := qualifiedName(name, db)
		if !ok {
			return nil, false
		}
		out = append(out, t)
	}
	return out, len(out) > 0
}

// droppedDatabase reads a DROP DATABASE (or SCHEMA) statement: the
// database whose tables it drops; false for any other statement, or a
// name it cannot read exactly.
func droppedDatabase(stmt string) (string, bool) {
	if i := strings.Index(stmt, "/*"); i >= 0 {
		stmt = stmt[:i]
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(stmt), ";"))
	if len(f) < 3 || !strings.EqualFold(f[0], "drop") || !strings.EqualFold(f[1], "database") && !strings.EqualFold(f[1], "schema") {
		return "", false
	}
	f = f[2:]
	if len(f) > 2 && strings.EqualFold(f[0], "if") && strings.EqualFold(f[1], "exists") {
		f = f[2:]
	}
	if len(f) != 1 {
		return "", false
	}
	t, ok := qualifiedName(f[0]+".t", "")
	if !ok {
		return "", false
	}
	db, _ := model.SplitTableName(t)
	return db, true
}

// renamedTables reads a RENAME TABLE statement (db is its default
// database): each table renamed and its new name, in order; false for any
// other statement, or one whose names it cannot read exactly.
func renamedTables(stmt, db string) ([][2]string, bool) {
	if i := strings.Index(stmt, "/*"); i >= 0 {
		stmt = stmt[:i]
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(stmt), ";"))
	if len(f) < 5 || !strings.EqualFold(f[0], "rename") || !strings.EqualFold(f[1], "table") && !strings.EqualFold(f[1], "tables") {
		return nil, false
	}
	f = f[2:]
	if len(f) > 2 && strings.EqualFold(f[0], "if") && strings.EqualFold(f[1], "exists") {
		f = f[2:]
	}
	if len(f) > 0 && strings.EqualFold(f[0], "wait") && len(f) > 1 {
		f = f[2:]
	} else if len(f) > 0 && strings.EqualFold(f[0], "nowait") {
		f = f[1:]
	}
	var out [][2]string
	for _, pair := range strings.Split(strings.Join(f, " "), ",") {
		p := strings.Fields(pair)
		if len(p) != 3 || !strings.EqualFold(p[1], "to") {
			return nil, false
		}
		from, ok1 := qualifiedName(p[0], db)
		to, ok2 := qualifiedName(p[2], db)
		if !ok1 || !ok2 {
			return nil, false
		}
		out = append(out, [2]string{from, to})
	}
	return out, len(out) > 0
}

// createdTable reads a CREATE TABLE statement (db is its default
// database): the table it creates, and whether it replaces one of that
// name (MariaDB's CREATE OR REPLACE: a new table where one was) or is
// only a session's temporary table; false for any other statement, or
// one whose name it cannot read exactly.
func createdTable(stmt, db string) (name string, replaces, temporary, ok bool) {
	f := strings.Fields(stmt)
	if len(f) < 3 || !strings.EqualFold(f[0], "create") {
		return "", false, false, false
	}
	f = f[1:]
	if len(f) > 2 && strings.EqualFold(f[0], "or") && strings.EqualFold(f[1], "replace") {
		replaces, f = true, f[2:]
	}
	if len(f) > 1 && strings.EqualFold(f[0], "temporary") {
		temporary, f = true, f[1:]
	}
	if len(f) < 2 || !strings.EqualFold(f[0], "table") {
		return "", false, false, false
	}
	f = f[1:]
	if len(f) > 3 && strings.EqualFold(f[0], "if") && strings.EqualFold(f[1], "not") && strings.EqualFold(f[2], "exists") {
		f = f[3:]
	}
	if len(f) == 0 {
		return "", false, false, false
	}
	// The name ends where its column list begins: "t(id INT" or "t (id".
	raw, _, _ := strings.Cut(f[0], "(")
	name, ok = qualifiedName(strings.TrimSuffix(raw, ";"), db)
	return name, replaces, temporary, ok
}

// changesNoTable says whether a statement cannot change a replicated
// table's columns or name. Only ALTER TABLE, CREATE or DROP INDEX,
// CREATE TABLE, RENAME TABLE, DROP TABLE, DROP DATABASE and TRUNCATE can
// (the reader reads them, or holds what they name when it cannot read
// them exactly). Everything else the binary log carries as a statement
// only names tables: a view, trigger, stored routine or event, a grant,
// a user, OPTIMIZE or ANALYZE TABLE (the same columns), a session's
// temporary table. A list of what may change a table, not of what may
// not: a statement kind not thought of is passed over, never held for
// naming a table. One that begins with a comment (a client's
// version-conditional /*!...*/) is read as one that may.
func changesNoTable(stmt string) bool {
	f := strings.Fields(strings.ToLower(stmt))
	if len(f) == 0 {
		return true
	}
	if strings.HasPrefix(f[0], "/*") {
		return false
	}
	// The object's kind: the first word after the verb that is not one
	// of its modifiers.
	kind := func(skip ...string) string {
		for _, w := range f[1:] {
			if !slices.Contains(skip, w) {
				return w
			}
		}
		return ""
	}
	switch f[0] {
	case "truncate":
		return false
	case "alter":
		return kind("online", "offline", "ignore") != "table"
	case "create":
		k := kind("or", "replace", "unique", "fulltext", "spatial", "online", "offline")
		return k != "table" && k != "index"
	case "drop":
		switch kind("online", "offline") {
		case "table", "tables", "index", "database", "schema":
			return false
		}
		return true
	case "rename":
		k := kind()
		return k != "table" && k != "tables"
	}
	return true
}

// qualifiedName reads a table name as a statement writes it (t, db.t,
// `t`, `db`.`t`) as the changefeed names tables; false when it cannot
// read it exactly.
func qualifiedName(name, db string) (string, bool) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", false
	}
	for i, p := range parts {
		if strings.HasPrefix(p, "`") {
			if len(p) < 3 || !strings.HasSuffix(p, "`") || strings.Contains(p[1:len(p)-1], "`") {
				return "", false
			}
			p = p[1 : len(p)-1]
		} else if p == "" || strings.ContainsAny(p, "`\"'") {
			return "", false
		}
		parts[i] = p
	}
	if len(parts) == 1 {
		return model.TableName(db, parts[0]), true
	}
	return model.TableName(parts[0], parts[1]), true
}

// namedTables are the replicated tables a schema change's statement
// names (the statement's default database is db). It errs towards
// naming: a table held for nothing is seen and resumed; one decoded
// with the wrong schema is not.
func namedTables(stmt, db string, tables map[string]tableState) []string {
	low := strings.ToLower(stmt)
	var out []string
	for t := range tables {
		schema, name := model.SplitTableName(t)
		n := regexp.QuoteMeta(strings.ToLower(name))
		re := regexp.MustCompile("(^|[^a-z0-9_$])`?" + n + "`?($|[^a-z0-9_$])")
		if !re.MatchString(low) {
			continue
		}
		if schema != db && !strings.Contains(low, strings.ToLower(schema)) {
			continue
		}
		out = append(out, t)
	}
	return out
}
