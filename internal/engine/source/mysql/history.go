package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// followAlter applies an ALTER TABLE of a replicated table to the schema
// the reader holds for it (alter.go), at the statement's own position:
// the table's new state (its default character set may change with no
// column) and the schema change event for the sink (nil when no column
// changed), or why the table is held. followed is false
// when the statement cannot be applied to the schema held (the table is
// then followed by the catalog at its next row, as before).
//
// When the catalog shows the very schema the statement gave (the reader
// is not behind a later change), the catalog's is used: the types as the
// server writes them ("int(11)"); otherwise the one the statement gave.
func followAlter(ctx context.Context, catalog func() (*sql.DB, error), table string, st tableState, a alterTable, stmt, flavor string) (next tableState, ddl *source.Event, why string, followed bool) {
	if a.renamed {
		return st, nil, "renamed upstream (" + stmt + "): follow it under its new name by removing this table and adding that one (cdcctl changefeed update)", true
	}
	var catDef *source.TableDef
	var catCharsets map[int]string
	read := false
	readCatalog := func() {
		if read {
			return
		}
		read = true
		db, err := catalog()
		if err != nil {
			return
		}
		catDef, catCharsets, _ = tableDef(ctx, db, table)
	}
	if a.key {
		// The table's schema was read from the catalog after the
		// statement (a table added back to copy it under its new key, the
		// reader then resuming before the statement): what the reader
		// holds is already what the catalog shows, the statement's key
		// included.
		if readCatalog(); catDef != nil && sameShape(st.Def, st.Charsets, catDef, catCharsets) {
			return st, nil, "", true
		}
		return st, nil, "its primary key changed (" + stmt + "): its partitions are ranges of the old key", true
	}
	// The default a column takes: the statement's own (wherever it
	// stands in it), else the one the history holds; the catalog's only
	// when the history does not know it (it may be a later one).
	defaultCharset := func() (string, bool) {
		if cs := cmp.Or(a.defaultCharset, st.DefaultCharset); cs != "" {
			return cs, true
		}
		db, err := catalog()
		if err != nil {
			return "", false
		}
		cs, err := tableCharset(ctx, db, table)
		return cs, err == nil
	}
	def, charsets, ok := a.apply(st.Def, st.Charsets, flavor, defaultCharset)
	if !ok {
		return st, nil, "", false
	}
	next = st
	next.DefaultCharset = cmp.Or(a.defaultCharset, st.DefaultCharset)
	if sameColumns(st.Def, def) && maps.Equal(st.Charsets, charsets) {
		return next, nil, "", true
	}
	if why := keyChanged(st.Def, def); why != "" {
		return st, nil, why, true
	}
	if readCatalog(); catDef != nil && sameShape(catDef, catCharsets, def, charsets) {
		def, charsets = catDef, catCharsets
	}
	next.Def, next.Charsets, next.Version = def, charsets, st.Version+1
	return next, &source.Event{Kind: source.KindDDL, Table: table, Def: def, SchemaVersion: next.Version, Statement: stmt}, "", true
}

// keyChanged says why a table whose definition changed from a to b is
// held when its primary key changed: its partitions are ranges of the old
// one.
func keyChanged(a, b *source.TableDef) string {
	if strings.Join(a.KeyNames(), ",") != strings.Join(b.KeyNames(), ",") || keyTypes(a) != keyTypes(b) {
		return fmt.Sprintf("its primary key changed (%s to %s): its partitions are ranges of the old key",
			strings.Join(a.KeyNames(), ","), strings.Join(b.KeyNames(), ","))
	}
	for _, k := range a.KeyNames() {
		from, to := a.Columns[a.Index(k)].Type, b.Columns[b.Index(k)].Type
		if !sameKeyText(from, to) {
			// Every key's text changes with no row event ("1.00" is
			// "1.000" now): the sink's rows stay under the old text, and
			// later changes, deletes too, come under the new.
			return fmt.Sprintf("the type of its key column %s changed (%s to %s), which changes the text every key is routed and written by", k, from, to)
		}
	}
	return ""
}

// sameKeyText says a key column's type change keeps every value's text:
// another integer type, another length of a string of characters or of
// bytes (not BINARY(n), which pads with zeros); not another scale of a
// DECIMAL, digits of fraction of a time, width of a BIT, FLOAT to
// DOUBLE, an ENUM's or SET's other members.
func sameKeyText(from, to string) bool {
	if from == to {
		return true
	}
	a, b := parseColumn(from), parseColumn(to)
	family := func(base string) string {
		switch base {
		case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
			return "int"
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
			return "chars"
		case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
			return "bytes"
		}
		return ""
	}
	if fa, fb := family(a.base), family(b.base); fa != "" || fb != "" {
		return fa == fb
	}
	if a.base != b.base {
		return false
	}
	switch a.base {
	case "time", "datetime", "timestamp", "binary", "bit":
		return a.width == b.width
	case "decimal":
		// A table map writes no ZEROFILL: only the scale is compared
		// where one side has none.
		return decimalScale(from) == decimalScale(to) && (a.zeroInt == b.zeroInt || !strings.Contains(from, "zerofill") || !strings.Contains(to, "zerofill"))
	case "float", "double":
		return a.scaled == b.scaled && decimalScale(from) == decimalScale(to)
	case "enum", "set":
		return slices.Equal(memberTexts(from), memberTexts(to))
	}
	return true // the same type written otherwise (a display width)
}

// memberTexts are an ENUM's or SET's members as written, their case
// kept (parseColumn lowers it).
func memberTexts(typ string) []string {
	i, j := strings.IndexByte(typ, '('), strings.LastIndexByte(typ, ')')
	if i < 0 || j < i {
		return nil
	}
	return parseMembers(typ[i+1 : j])
}

// decimalScale is a DECIMAL(M,D)'s D.
func decimalScale(typ string) string {
	_, args, _ := strings.Cut(typ, "(")
	args, _, _ = strings.Cut(args, ")")
	_, d, _ := strings.Cut(args, ",")
	return strings.TrimSpace(d)
}

// tableCharset reads a table's default character set from the catalog:
// the set of a character column a statement adds without naming one.
func tableCharset(ctx context.Context, db queryer, table string) (string, error) {
	schema, name := model.SplitTableName(table)
	cs, err := defaultCharset(ctx, db, schema, name)
	if err == nil && cs == "" {
		err = fmt.Errorf("table %s has no default character set in the catalog", table)
	}
	return cs, err
}

// markUnfollowed notes a statement the schema history did not follow:
// the table's next row reads the catalog, in this reader (pending) and,
// through the resume point, in one started again after it. Statements
// since the last row are kept together, in order (the schema change the
// sink gets names them).
func markUnfollowed(pending map[string]string, at *position, t, stmt string) {
	if prev := pending[t]; prev != "" {
		stmt = prev + "; " + stmt
	}
	pending[t] = stmt
	st := at.Tables[t]
	st.Unfollowed = stmt
	at.Tables = withTable(at.Tables, t, st)
}
