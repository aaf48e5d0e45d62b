package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A column's type changed (MODIFY, CHANGE, CONVERT TO CHARACTER SET, an
// online schema change's swap) can change the value of every row of the
// table: a DECIMAL's scale rounds them, a character set recodes them, a
// DATETIME given a fraction writes them another way. The server writes
// no row event for those rows, so every row left alone since kept its old
// value downstream. The reader knows the types before and after, and
// MySQL converts without a USING: whether the values change follows from
// the two types (keepsValues). When they may, the reader writes a mark
// into the binary log (a row of the signal table, kind source.MarkAgain,
// with where the change was met) once it has read the change's
// transaction, and every partition of the table meets it in the stream
// and copies its range again, between watermarks, as the initial
// snapshot does.

// copyAgain is a table to copy again after a change its transaction made.
type copyAgain struct {
	Table string
	At    model.Ts // the table's last change in the transaction
}

// copiesAgain are the tables whose columns the transaction's schema
// changes gave types that may change their values (before: the tables
// as the transaction began; after: as it ends).
func (cur *txn) copiesAgain(after map[string]tableState) []copyAgain {
	var out []copyAgain
	for i := len(cur.ddls) - 1; i >= 0; i-- {
		d := cur.ddls[i]
		if slices.ContainsFunc(out, func(a copyAgain) bool { return a.Table == d.Table }) {
			continue
		}
		old, ok := cur.before[d.Table]
		now, still := after[d.Table]
		if ok && still && !now.Dropped && old.Def != nil && now.Def != nil && !sameValues(old, now) {
			out = append(out, copyAgain{Table: d.Table, At: d.CommitTs})
		}
	}
	return out
}

// sameValues says whether every column of old that goes on in now keeps
// its rows' values: paired by name, or, renamed, by place.
func sameValues(old, now tableState) bool {
	for j, c := range now.Def.Columns {
		i := slices.IndexFunc(old.Def.Columns, func(o source.ColumnDef) bool { return o.Name == c.Name })
		if i < 0 && j < len(old.Def.Columns) && !slices.ContainsFunc(now.Def.Columns, func(n source.ColumnDef) bool { return n.Name == old.Def.Columns[j].Name }) {
			i = j // CHANGE a b …: renamed in place
		}
		if i < 0 {
			continue // added: its values came with it
		}
		if !keepsValues(old.Def.Columns[i].Type, c.Type, old.Charsets[i], now.Charsets[j]) {
			return false
		}
	}
	return true
}

// intRank orders the integer types by their range.
var intRank = map[string]int{"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "integer": 4, "bigint": 5}

// textRank orders the character and byte string types by what they hold:
// a value of one fits every later one of its family unchanged.
var textRank = map[string]int{"char": 1, "varchar": 2, "tinytext": 3, "text": 4, "mediumtext": 5, "longtext": 6,
	"varbinary": 2, "tinyblob": 3, "blob": 4, "mediumblob": 5, "longblob": 6}

// keepsValues says whether MySQL's conversion of a column from type from
// to type to (COLUMN_TYPE, each with its character set when not UTF-8)
// keeps every value as the stream writes it (text, in UTF-8): an integer
// or DECIMAL widened, a string type made longer in its family or
// converted to UTF-8, an ENUM or SET given members at its end. Anything
// else may change them.
func keepsValues(from, to, fromCharset, toCharset string) bool {
	if fromCharset != toCharset && toCharset != "" {
		// Into another set than UTF-8 ("" here), which holds every
		// character of the others, a character may become '?'.
		return false
	}
	if strings.EqualFold(from, to) {
		return true
	}
	f, t := parseColumn(from), parseColumn(to)
	if strings.Contains(strings.ToLower(from), "zerofill") != strings.Contains(strings.ToLower(to), "zerofill") {
		return false
	}
	widerSign := !f.unsigned || t.unsigned // signed to unsigned clamps negatives
	switch {
	case intRank[f.base] > 0 && intRank[t.base] > 0:
		return f.unsigned == t.unsigned && intRank[t.base] >= intRank[f.base] ||
			f.unsigned && !t.unsigned && intRank[t.base] > intRank[f.base]
	case (f.base == "decimal" || f.base == "numeric") && (t.base == "decimal" || t.base == "numeric"):
		return widerSign && t.scale == f.scale && t.precision-t.scale >= f.precision-f.scale
	case f.base == "enum" && t.base == "enum", f.base == "set" && t.base == "set":
		return len(t.values) >= len(f.values) && slices.Equal(t.values[:len(f.values)], f.values)
	}
	fr, tr := textRank[f.base], textRank[t.base]
	if fr == 0 || tr == 0 || isBytes(f.base) != isBytes(t.base) || tr < fr {
		return false
	}
	if f.base == "varchar" && t.base == "char" {
		return false // CHAR drops trailing spaces
	}
	if tr == fr && (fr == 1 || fr == 2) {
		return lengthOf(to) >= lengthOf(from)
	}
	return true
}

// isBytes says a string type holds bytes, not characters.
func isBytes(base string) bool {
	return strings.Contains(base, "bin") || strings.Contains(base, "blob")
}

// lengthOf is a CHAR's, VARCHAR's or VARBINARY's length (1 when not
// given).
func lengthOf(typ string) int {
	_, args, ok := strings.Cut(typ, "(")
	if !ok {
		return 1
	}
	args, _, _ = strings.Cut(args, ")")
	n, err := strconv.Atoi(strings.TrimSpace(args))
	if err != nil {
		return 1
	}
	return n
}

// markAgain writes a mark for each table to copy again, in one
// transaction on db (opened on first use): a row of the signal table
// inserted and deleted, which the stream meets (marksIn). A table that
// cannot be copied again (no primary key, or snapshot=never) is told
// instead. An error starts the reader again, before the change: it is met
// and marked again.
func (p *Puller) markAgain(ctx context.Context, db **sql.DB, again []copyAgain, tables map[string]tableState) error {
	var names []string
	for _, a := range again {
		switch def := tables[a.Table].Def; {
		case p.cfg.Snapshot == "never":
			p.log.Warn("mysql source: a column's type changed and its rows' values may have with it; with snapshot=never the rows not changed since keep their old values downstream: copy the table again (docs/mysql.md)", "changefeed", p.cf, "table", a.Table)
		case len(def.KeyNames()) == 0:
			p.log.Warn("mysql source: a column's type changed in a table without a primary key and its rows' values may have with it; the rows not changed since keep their old values downstream: copy the table again (docs/mysql.md)", "changefeed", p.cf, "table", a.Table)
		default:
			p.log.Info("mysql source: a column's type changed and its rows' values may have with it; the table is copied again", "changefeed", p.cf, "table", a.Table)
			names = append(names, markPrefix(p.cfg)+tableTag(a.Table)+"/"+strconv.FormatUint(uint64(a.At), 10)+"/"+source.MarkAgain)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if *db == nil {
		d, err := signalDB(p.cfg)
		if err != nil {
			return err
		}
		d.SetMaxOpenConns(1)
		*db = d
	}
	signal := quoteTable(model.TableName(p.cfg.Database, signalTable))
	tx, err := (*db).BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mysql source: cannot mark a table whose column types changed to be copied again: %w", explain(p.cfg, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, n := range names {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+signal+" (changefeed, at) VALUES (?, 0)", n); err != nil {
			return fmt.Errorf("mysql source: cannot mark a table whose column types changed to be copied again: %w", explain(p.cfg, err))
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+signal+" WHERE changefeed = ?", n); err != nil {
			return fmt.Errorf("mysql source: cannot mark a table whose column types changed to be copied again: %w", explain(p.cfg, err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mysql source: cannot mark a table whose column types changed to be copied again: %w", explain(p.cfg, err))
	}
	return nil
}
