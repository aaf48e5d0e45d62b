package mysql

import (
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The schema history: an ALTER TABLE read from the binary log is applied
// to the schema the reader holds for its table, at the statement's own
// position, so the rows after it are decoded with the columns they were
// written with even when the reader is far behind and the catalog shows a
// later schema (the binary log without binlog_row_metadata=FULL names no
// columns; with it, this is checked against every row's table map). The
// schema is kept in every resume point, so a reader restarted behind
// several ALTERs replays them from the schema at its checkpoint.
//
// Only what changes the columns is read: ADD, DROP, MODIFY, CHANGE and
// RENAME COLUMN, with FIRST and AFTER; index, constraint, partition and
// table options change no column and are passed over. Anything else
// (a clause this reader does not know, a generated column, CONVERT TO
// CHARACTER SET, a conditional comment) is not followed here: the table
// is then followed as before, by the catalog at its next row (schema.go).

// alterTable is an ALTER TABLE statement read for its column changes.
type alterTable struct {
	table string // as the changefeed names tables (db.t)
	specs []alterSpec
	// key says the statement changes the primary key: the table is held
	// (its partitions are ranges of the old key).
	key bool
	// renamed says the statement renames the table: held, as a RENAME;
	// renamedTo is the new name (db.t) where it reads exactly.
	renamed   bool
	renamedTo string
	// renameTo is the new name as written: [db, t] or [t, ""].
	renameTo [2]string
	// defaultCharset is the table's default character set the statement
	// sets ([DEFAULT] CHARACTER SET, COLLATE, CONVERT TO CHARACTER SET);
	// "" when it sets none. The server gives it to every character
	// column the same statement adds or redefines without a set of its
	// own, wherever the clause stands.
	defaultCharset string
	// converts: CONVERT TO CHARACTER SET, which recodes every character
	// column; not followed here (the catalog is read at the table's next
	// row), but the default it sets is known.
	converts bool
	// defaulted are the columns whose default an ALTER [COLUMN] … SET
	// DEFAULT or DROP DEFAULT changes (no row changes with it).
	defaulted []string
}

// alterSpec is one column change.
type alterSpec struct {
	op    string // "add", "drop", "modify", "change", "rename"
	name  string // the column it changes (the old name for change and rename)
	col   colDef // the new definition (add, modify, change; rename: its name)
	first bool
	after string
	// ifExists: IF EXISTS (drop, modify, change) or IF NOT EXISTS (add):
	// no error when the column is (not) there, the clause does nothing.
	ifExists bool
}

// colDef is a column definition as a statement writes it.
type colDef struct {
	name     string
	typ      string // as the catalog writes COLUMN_TYPE, without integer display widths
	nullable bool
	charset  string // explicit CHARACTER SET or COLLATE; "" is the table's default
	textual  bool   // a character type: its charset matters
	// literal: its DEFAULT is a constant (a string or a number), which
	// an ADD gives every row already in the table; an expression's value
	// (CURRENT_TIMESTAMP, (expr)) is the statement's moment's.
	literal bool
}

// parseAlter reads an ALTER TABLE statement (db is its default
// database); false when it is not one or has something this reader does
// not follow.
func parseAlter(stmt, db string) (alterTable, bool) {
	toks, ok := tokenize(stmt)
	if !ok {
		return alterTable{}, false
	}
	r := &alterReader{toks: toks}
	if !r.accept("alter") {
		return alterTable{}, false
	}
	_ = r.accept("online") || r.accept("offline")
	r.accept("ignore")
	if !r.accept("table") {
		return alterTable{}, false
	}
	r.accept("if", "exists")
	var a alterTable
	first, ok := r.name()
	if !ok {
		return a, false
	}
	a.table = model.TableName(db, first)
	if r.punct(".") {
		second, ok := r.name()
		if !ok {
			return a, false
		}
		a.table = model.TableName(first, second)
	}
	if r.accept("wait") {
		r.i++ // its seconds
	} else {
		r.accept("nowait")
	}
	if r.atSpecEnd() {
		// No clause (the table rebuilt): no column changes.
		r.punct(";")
		return a, r.peek(0).kind == 0
	}
	for {
		if !r.spec(&a) {
			return a, false
		}
		if !r.punct(",") {
			r.punct(";")
			switch {
			case a.renameTo[0] == "":
			case a.renameTo[1] == "":
				a.renamedTo = model.TableName(db, a.renameTo[0])
			default:
				a.renamedTo = model.TableName(a.renameTo[0], a.renameTo[1])
			}
			return a, r.peek(0).kind == 0
		}
	}
}

// spec reads one clause into a.
func (r *alterReader) spec(a *alterTable) bool {
	switch {
	case r.accept("add"):
		switch {
		case r.is("primary"), r.is("constraint") && (r.peekWord(1, "primary") || r.peekWord(2, "primary")):
			// [CONSTRAINT [name]] PRIMARY KEY
			a.key = true
			return r.skipSpec()
		case r.is("index"), r.is("key"), r.is("unique"), r.is("fulltext"), r.is("spatial"), r.is("foreign"), r.is("check"),
			r.is("constraint"), r.is("partition"), r.is("period"), r.is("system"), r.is("vector"):
			return r.skipSpec()
		}
		r.accept("column")
		ifNot := r.accept("if", "not", "exists")
		if r.punct("(") {
			// ADD (a INT, b INT): at the end, in order.
			for {
				col, ok := r.column(a)
				if !ok {
					return false
				}
				a.specs = append(a.specs, alterSpec{op: "add", name: col.name, col: col, ifExists: ifNot})
				if r.punct(",") {
					continue
				}
				return r.punct(")")
			}
		}
		col, ok := r.column(a)
		if !ok {
			return false
		}
		s := alterSpec{op: "add", name: col.name, col: col, ifExists: ifNot}
		return r.place(&s) && r.add(a, s)
	case r.accept("drop"):
		switch {
		case r.is("primary"):
			a.key = true
			return r.skipSpec()
		case r.is("index"), r.is("key"), r.is("constraint"):
			// DROP INDEX `PRIMARY` is DROP PRIMARY KEY, as the
			// statement DROP INDEX `PRIMARY` ON t is.
			n := 1
			if r.peekWord(1, "if") && r.peekWord(2, "exists") {
				n = 3
			}
			if t := r.peek(n); (t.kind == 'w' || t.kind == 'q') && strings.EqualFold(t.text, "primary") {
				a.key = true
			}
			return r.skipSpec()
		case r.is("foreign"), r.is("check"), r.is("partition"), r.is("period"), r.is("system"):
			return r.skipSpec()
		}
		r.accept("column")
		s := alterSpec{op: "drop", ifExists: r.accept("if", "exists")}
		var ok bool
		if s.name, ok = r.name(); !ok {
			return false
		}
		r.accept("restrict")
		r.accept("cascade")
		return r.atSpecEnd() && r.add(a, s)
	case r.is("modify"), r.is("change"):
		op := strings.ToLower(r.peek(0).text)
		r.i++
		r.accept("column")
		s := alterSpec{op: op, ifExists: r.accept("if", "exists")}
		var ok bool
		if s.name, ok = r.name(); !ok {
			return false
		}
		if op == "modify" {
			r.i-- // the definition begins with the name
		}
		if s.col, ok = r.column(a); !ok {
			return false
		}
		return r.place(&s) && r.add(a, s)
	case r.accept("rename"):
		switch {
		case r.accept("column"):
			s := alterSpec{op: "rename"}
			var ok bool
			if s.name, ok = r.name(); !ok || !r.accept("to") {
				return false
			}
			if s.col.name, ok = r.name(); !ok {
				return false
			}
			return r.atSpecEnd() && r.add(a, s)
		case r.is("index"), r.is("key"):
			return r.skipSpec()
		}
		a.renamed = true
		_ = r.accept("to") || r.accept("as")
		if first, ok := r.name(); ok {
			a.renameTo = [2]string{first, ""}
			if r.punct(".") {
				if a.renameTo[1], ok = r.name(); !ok {
					a.renameTo = [2]string{}
				}
			}
			if !r.atSpecEnd() {
				a.renameTo = [2]string{}
			}
		}
		return r.skipSpec()
	case r.accept("alter"):
		// ALTER [COLUMN] c SET DEFAULT / DROP DEFAULT / SET [IN]VISIBLE,
		// ALTER INDEX, ALTER CHECK: no column's type or name; a changed
		// default is noted.
		if !r.is("index") && !r.is("check") && !r.is("constraint") {
			r.accept("column")
			if name, ok := r.name(); ok && (r.is("set", "default") || r.is("drop", "default")) {
				a.defaulted = append(a.defaulted, name)
			}
		}
		return r.skipSpec()
	case r.accept("convert", "to"):
		if cs, ok := r.charset(); ok && cs != "default" {
			a.defaultCharset, a.converts = cs, true
		}
		return false
	case r.is("discard"), r.is("import"), r.is("exchange"):
		return false
	}
	// Table options and the like (ENGINE=, COMMENT=, ALGORITHM=, FORCE,
	// DEFAULT CHARSET=, PARTITION BY, ORDER BY, ENABLE KEYS, ...): no
	// column changes. Only words known to be options are passed over.
	t := r.peek(0)
	if t.kind != 'w' || !tableOptions[strings.ToLower(t.text)] {
		return false
	}
	return r.tableOptions(a)
}

// tableOptions passes a clause of table options, which may follow one
// another without commas ("ENGINE=InnoDB DEFAULT CHARSET=latin1"),
// keeping the default character set they set: CHARACTER SET's, else
// COLLATE's.
func (r *alterReader) tableOptions(a *alterTable) bool {
	collated := ""
	for !r.atSpecEnd() {
		switch {
		case r.punct("("):
			if !r.skipGroup() {
				return false
			}
		case r.is("collate"):
			cs, ok := r.charset()
			if !ok || cs == "default" {
				return false // the database's: not known here
			}
			collated = cs
		case r.is("character", "set"), r.is("charset"):
			cs, ok := r.charset()
			if !ok || cs == "default" {
				return false
			}
			a.defaultCharset = cs
		default:
			r.i++
		}
	}
	if a.defaultCharset == "" {
		a.defaultCharset = collated
	}
	return true
}

// tableOptions begin the clauses that change no column.
var tableOptions = map[string]bool{
	"engine": true, "auto_increment": true, "comment": true, "row_format": true, "key_block_size": true,
	"stats_auto_recalc": true, "stats_persistent": true, "stats_sample_pages": true, "avg_row_length": true,
	"checksum": true, "table_checksum": true, "pack_keys": true, "max_rows": true, "min_rows": true,
	"delay_key_write": true, "algorithm": true, "lock": true, "force": true, "order": true, "enable": true,
	"disable": true, "default": true, "character": true, "charset": true, "collate": true, "partition": true,
	"remove": true, "coalesce": true, "reorganize": true, "analyze": true, "check": true, "optimize": true,
	"rebuild": true, "repair": true, "truncate": true, "truncate_partition": true, "page_checksum": true,
	"page_compressed": true, "page_compression_level": true, "transactional": true, "encrypted": true,
	"encryption_key_id": true, "ietf_quotes": true, "sequence": true, "with": true, "without": true,
	"insert_method": true, "union": true, "data": true, "index": true, "connection": true, "compression": true,
	"secondary_engine": true, "tablespace": true, "storage": true, "autoextend_size": true, "validation": true,
}

// place reads FIRST or AFTER c.
func (r *alterReader) place(s *alterSpec) bool {
	switch {
	case r.accept("first"):
		s.first = true
	case r.accept("after"):
		var ok bool
		if s.after, ok = r.name(); !ok {
			return false
		}
	}
	return true
}

func (r *alterReader) add(a *alterTable, s alterSpec) bool {
	a.specs = append(a.specs, s)
	return r.atSpecEnd()
}

// column reads "name type attributes" up to the clause's end, a FIRST
// or AFTER, or a ',' or ')' of an ADD (...) list.
func (r *alterReader) column(a *alterTable) (colDef, bool) {
	var c colDef
	var ok bool
	if c.name, ok = r.name(); !ok {
		return c, false
	}
	if c.typ, c.textual, c.charset, ok = r.dataType(); !ok {
		return c, false
	}
	c.nullable = true
	for {
		t := r.peek(0)
		switch {
		case t.kind == 0, t.kind == 'p' && (t.text == "," || t.text == ";" || t.text == ")"), r.is("first"), r.is("after"):
			return c, true
		case r.punct("("):
			if !r.skipGroup() {
				return c, false
			}
		case r.accept("not", "null"):
			c.nullable = false
		case r.accept("primary", "key"), r.accept("key"):
			a.key = true
			c.nullable = false
		case r.accept("unique", "key"), r.accept("unique"):
		case r.is("character", "set"), r.is("charset"), r.is("collate"):
			if c.charset, ok = r.charset(); !ok {
				return c, false
			}
		case r.is("as"), r.is("generated"):
			// A generated column: whether the binary log carries it
			// depends on the server and its kind; the catalog decides.
			return c, false
		case r.accept("default"):
			// Its value: a group, or a literal, a signed number or a
			// call; what follows is read as attributes again.
			if r.punct("(") {
				if !r.skipGroup() {
					return c, false
				}
				continue
			}
			_ = r.punct("-") || r.punct("+")
			if r.atSpecEnd() {
				return c, false
			}
			c.literal = isConstant(r.peek(0)) && !r.peekPunct(1, "(")
			r.i++
		default:
			r.i++
		}
	}
}

// isConstant says a token is a string or a number (or TRUE, FALSE):
// not NULL, not a name of a function or of CURRENT_TIMESTAMP.
func isConstant(t token) bool {
	switch {
	case t.kind == 's':
		return true
	case t.kind == 'w' && t.text[0] >= '0' && t.text[0] <= '9':
		return true
	}
	return t.kind == 'w' && (strings.EqualFold(t.text, "true") || strings.EqualFold(t.text, "false"))
}

// charset reads CHARACTER SET x, CHARSET x or COLLATE x as the character
// set it names.
func (r *alterReader) charset() (string, bool) {
	collate := r.accept("collate")
	if !collate && !r.accept("character", "set") && !r.accept("charset") {
		return "", false
	}
	r.punct("=")
	name, ok := r.name()
	if !ok {
		return "", false
	}
	name = strings.ToLower(name)
	if collate {
		name, _, _ = strings.Cut(name, "_")
		if _, decoded := decoders[name]; !decoded && !asUTF8(name) && name != "latin1" && name != "utf8" {
			// A collation named without its set (MariaDB 10.10+'s
			// uca1400_ai_ci takes the set given beside it, or the
			// table's), or a set the reader does not decode: the catalog
			// says which. Read as a set, "uca1400" held the table's rows.
			return "", false
		}
	}
	if name == "utf8" || name == "utf8mb3" {
		name = "utf8mb4" // as the catalog's: none of them is recoded
	}
	return name, true
}
