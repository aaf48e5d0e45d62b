package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Schema changes are followed at the first row written after them: its
// table map (the binary log's description of the columns the row has:
// their names with binlog_row_metadata=FULL, always their types) is
// compared with the schema the reader holds. When they differ, or an
// ALTER TABLE named the table since, the catalog is read: if it agrees
// with the table map (same columns, same names, compatible types), it is
// the row's schema, and a schema change event goes before the row. If it
// does not (the reader is behind several schema changes, and the
// catalog already shows a later one), the row's own schema is built from
// its table map, and without the metadata for that the table is held,
// never decoded with a schema that is not its rows'. (Then, when the table map carries
// the columns' names, signedness, values and key, binlog_row_metadata=FULL,
// the row's schema is built from it: defFromMap.)

// mapMatches says whether a row's table map describes the schema the
// reader holds for its table: as many columns, the same names (when the
// map carries them) and types of the same family.
func mapMatches(tm *replication.TableMapEvent, def *source.TableDef) bool {
	if int(tm.ColumnCount) != len(def.Columns) {
		return false
	}
	names := tm.ColumnNameString()
	enums, sets := tm.EnumStrValueString(), tm.SetStrValueString()
	for i, c := range def.Columns {
		if len(names) == len(def.Columns) && !strings.EqualFold(names[i], c.Name) {
			return false
		}
		if !typeFits(tm, i, c.Type) || !metaFits(tm, i, parseColumn(c.Type)) {
			return false
		}
	}
	// ENUM and SET members, in the map with binlog_row_metadata=FULL, one
	// list per such column in column order.
	var enumAt, setAt int
	for _, c := range def.Columns {
		switch col := parseColumn(c.Type); col.base {
		case "enum":
			if enumAt < len(enums) && !sameMembers(enums[enumAt], col.values) {
				return false
			}
			enumAt++
		case "set":
			if setAt < len(sets) && !sameMembers(sets[setAt], col.values) {
				return false
			}
			setAt++
		}
	}
	return true
}

// sameMembers compares a table map's ENUM or SET members with the
// catalog's, when both are plain ASCII: the map's are in the column's
// character set (ucs2's are not UTF-8's), the catalog's in UTF-8 and
// with some characters escaped; those are not compared.
func sameMembers(inMap, catalog []string) bool {
	plain := func(ms []string) bool {
		for _, m := range ms {
			for i := 0; i < len(m); i++ {
				if m[i] < ' ' || m[i] > '~' || m[i] == '\\' {
					return false
				}
			}
		}
		return true
	}
	if !plain(inMap) || !plain(catalog) {
		return true
	}
	return slices.Equal(inMap, catalog)
}

// metaFits says whether a table map's meta of column i (what every
// table map carries, whatever binlog_row_metadata says) agrees with the
// catalog's column: a time's fraction digits, a decimal's precision and
// scale. Both decode as the same family; read with the catalog's later
// ones, a DATETIME(3)'s fraction was cut.
func metaFits(tm *replication.TableMapEvent, i int, col column) bool {
	if i >= len(tm.ColumnMeta) {
		return true
	}
	meta := tm.ColumnMeta[i]
	switch tm.ColumnType[i] {
	case gomysql.MYSQL_TYPE_TIME2, gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_TIMESTAMP2:
		return int(meta) == col.width
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		return int(meta>>8) == col.precision && int(meta&0xff) == col.scale
	}
	return true
}

// typeFits says whether column i of a table map can be the catalog type
// colType: the same family of storage (an INT never read as a BIGINT,
// a string never as a number).
func typeFits(tm *replication.TableMapEvent, i int, colType string) bool {
	t := tm.ColumnType[i]
	if t == gomysql.MYSQL_TYPE_STRING && i < len(tm.ColumnMeta) {
		// ENUM and SET travel as STRING, their real type in the meta.
		if real := byte(tm.ColumnMeta[i] >> 8); real == gomysql.MYSQL_TYPE_ENUM || real == gomysql.MYSQL_TYPE_SET {
			t = real
		}
	}
	base := parseColumn(colType).base
	switch t {
	case gomysql.MYSQL_TYPE_TINY:
		return base == "tinyint" || base == "bool" || base == "boolean"
	case gomysql.MYSQL_TYPE_SHORT:
		return base == "smallint"
	case gomysql.MYSQL_TYPE_INT24:
		return base == "mediumint"
	case gomysql.MYSQL_TYPE_LONG:
		return base == "int" || base == "integer"
	case gomysql.MYSQL_TYPE_LONGLONG:
		return base == "bigint"
	case gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_DECIMAL:
		return base == "decimal" || base == "numeric"
	case gomysql.MYSQL_TYPE_FLOAT:
		return base == "float"
	case gomysql.MYSQL_TYPE_DOUBLE:
		return base == "double" || base == "real"
	case gomysql.MYSQL_TYPE_BIT:
		return base == "bit"
	case gomysql.MYSQL_TYPE_YEAR:
		return base == "year"
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE:
		return base == "date"
	case gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2:
		return base == "time"
	case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2:
		return base == "datetime"
	case gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2:
		return base == "timestamp"
	case gomysql.MYSQL_TYPE_ENUM:
		return base == "enum"
	case gomysql.MYSQL_TYPE_SET:
		return base == "set"
	case gomysql.MYSQL_TYPE_JSON:
		return base == "json"
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		return base == "varchar" || base == "varbinary"
	case gomysql.MYSQL_TYPE_STRING:
		return base == "char" || base == "binary" || fixedBinary(base)
	case gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
		return strings.HasSuffix(base, "blob") || strings.HasSuffix(base, "text") || base == "json" || base == "longtext"
	case gomysql.MYSQL_TYPE_GEOMETRY:
		// Every spatial type (MySQL 8's catalog says geomcollection).
		switch base {
		case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection":
			return true
		}
		return false
	}
	return true // a type this check does not know: the catalog's word
}

// followSchema reads a table's schema from the catalog for a row whose
// table map differs from what the reader holds (or after an ALTER
// TABLE). It returns the table's new state and the schema change event
// to write before the row (nil when nothing changed), or why the table
// must be held, or an error the reader starts again for: a catalog that
// cannot be read now (a failover, too many connections) holds nothing,
// whose remedy would copy the table again.
func followSchema(ctx context.Context, db *sql.DB, table string, st tableState, tm *replication.TableMapEvent, stmt string) (tableState, *source.Event, string, error) {
	def, charsets, err := tableDef(ctx, db, table)
	if err != nil && !errors.Is(err, errNoTable) {
		return st, nil, "", fmt.Errorf("its schema changed and the catalog cannot be read: %w", err)
	}
	if err != nil {
		return st, nil, fmt.Sprintf("its schema changed and the catalog cannot be read: %v; fix the cause, then resume the changefeed", err), nil
	}
	if !mapMatches(tm, def) {
		// The catalog shows a later schema than the row's (the reader is
		// behind a second change): the row's own, from its table map.
		mdef, mcharsets, ok := defFromMap(tm, table)
		if !ok {
			return st, nil, "its schema changed more than once since the rows the reader reads now were written (the catalog shows a later schema than theirs), and the binary log does not describe the rows' columns (binlog_row_metadata is not FULL): set binlog_row_metadata=FULL, then remove the changefeed and create it again (docs/mysql.md)", nil
		}
		def, charsets = mdef, mcharsets
	} else {
		charsets = mapCharsets(tm, charsets)
	}
	next := st
	next.DefaultCharset = defaultAfter(stmt)
	// The character sets count: CONVERT TO CHARACTER SET recodes every
	// character column and changes no type, and rows after it decoded
	// as latin1 were garbled.
	if sameColumns(st.Def, def) && maps.Equal(st.Charsets, charsets) {
		return next, nil, "", nil
	}
	if why := keyChanged(st.Def, def); why != "" {
		return st, nil, why, nil
	}
	if stmt == "" {
		stmt = "ALTER TABLE " + quoteTable(table) + " -- columns changed"
	}
	next.Def, next.Version, next.Charsets = def, st.Version+1, charsets
	ev := source.Event{Kind: source.KindDDL, Table: table, Def: def, SchemaVersion: next.Version, Statement: stmt}
	return next, &ev, "", nil
}

// mapCharsets corrects the catalog's character sets by a row's table map
// where it names its character columns' collations: the set the row was
// written in, though the catalog may show a later one. A collation id
// not known is taken for UTF-8.
func mapCharsets(tm *replication.TableMapEvent, charsets map[int]string) map[int]string {
	coll := tm.CollationMap()
	if coll == nil {
		return charsets
	}
	out := map[int]string{}
	maps.Copy(out, charsets)
	for i, c := range coll {
		cs, ok := collationSet(c)
		if !ok {
			// Not a collation of MariaDB 10.11 or MySQL 8: a later
			// server's, taken for UTF-8.
			cs = "utf8mb4"
		}
		setCharset(out, i, cs)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// setCharset keeps column i's set in charsets as the catalog's are kept:
// every set but UTF-8 (and a column of bytes, which the catalog gives
// none).
func setCharset(charsets map[int]string, i int, cs string) {
	if cs == "utf8mb4" || cs == "binary" {
		delete(charsets, i)
		return
	}
	charsets[i] = cs
}

// defaultAfter is a table's default character set after a statement the
// history did not follow (schema.go reads the catalog for it): the one
// it sets, if it is read that far (CONVERT TO CHARACTER SET); otherwise
// not known, and the catalog's is taken when a column needs it.
func defaultAfter(stmt string) string {
	if a, ok := parseAlter(stmt, ""); ok || a.converts {
		return a.defaultCharset
	}
	return ""
}

// sameColumns says whether two definitions have the same columns, in
// order, with the same types, nullability and key positions.
func sameColumns(a, b *source.TableDef) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		if a.Columns[i] != b.Columns[i] {
			return false
		}
	}
	return true
}

// withTable is tables with one table's state replaced: resume points
// already passed keep the map they had.
func withTable(tables map[string]tableState, table string, st tableState) map[string]tableState {
	out := maps.Clone(tables)
	out[table] = st
	return out
}

// defFromMap builds a table's definition from a row's table map, when
// the binary log carries the columns' names, signedness, values and
// primary key (binlog_row_metadata=FULL): the schema the row was
// written with, whatever the catalog shows now. Types are written
// without display widths ("int", "int unsigned", "decimal(10,2)").
func defFromMap(tm *replication.TableMapEvent, table string) (*source.TableDef, map[int]string, bool) {
	names := tm.ColumnNameString()
	if len(names) != int(tm.ColumnCount) || len(tm.PrimaryKey) == 0 && len(tm.PrimaryKeyPrefix) == 0 {
		return nil, nil, false
	}
	schema, name := model.SplitTableName(table)
	def := &source.TableDef{Schema: schema, Name: name, Dialect: source.DialectMySQL}
	collations := tm.CollationMap()
	unsigned := tm.UnsignedMap()
	enums, sets := tm.EnumStrValueMap(), tm.SetStrValueMap()
	var charsets map[int]string
	for i, n := range names {
		typ, ok := mapType(tm, i, unsigned[i], collations[i], enums[i], sets[i])
		if !ok {
			return nil, nil, false
		}
		_, nullable := tm.Nullable(i)
		def.Columns = append(def.Columns, source.ColumnDef{Name: n, Type: typ, Nullable: nullable})
		if cs, ok := collationSet(collations[i]); ok && cs != "utf8mb4" && cs != "binary" {
			if charsets == nil {
				charsets = map[int]string{}
			}
			setCharset(charsets, i, cs)
		}
	}
	key := tm.PrimaryKey
	if len(key) == 0 {
		for i := 0; i+1 < len(tm.PrimaryKeyPrefix); i += 2 {
			key = append(key, tm.PrimaryKeyPrefix[i])
		}
	}
	for pos, idx := range key {
		if int(idx) >= len(def.Columns) {
			return nil, nil, false
		}
		def.Columns[idx].KeyPos = pos + 1
	}
	return def, charsets, true
}

// mapType writes column i's type from its table map.
func mapType(tm *replication.TableMapEvent, i int, unsigned bool, collation uint64, enum, set []string) (string, bool) {
	t, meta := tm.ColumnType[i], uint16(0)
	if i < len(tm.ColumnMeta) {
		meta = tm.ColumnMeta[i]
	}
	sign := ""
	if unsigned {
		sign = " unsigned"
	}
	binary := collation == 63
	switch t {
	case gomysql.MYSQL_TYPE_TINY:
		return "tinyint" + sign, true
	case gomysql.MYSQL_TYPE_SHORT:
		return "smallint" + sign, true
	case gomysql.MYSQL_TYPE_INT24:
		return "mediumint" + sign, true
	case gomysql.MYSQL_TYPE_LONG:
		return "int" + sign, true
	case gomysql.MYSQL_TYPE_LONGLONG:
		return "bigint" + sign, true
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		return fmt.Sprintf("decimal(%d,%d)%s", meta>>8, meta&0xff, sign), true
	case gomysql.MYSQL_TYPE_FLOAT:
		return "float" + sign, true
	case gomysql.MYSQL_TYPE_DOUBLE:
		return "double" + sign, true
	case gomysql.MYSQL_TYPE_BIT:
		return fmt.Sprintf("bit(%d)", (meta>>8)*8+meta&0xff), true
	case gomysql.MYSQL_TYPE_YEAR:
		return "year", true
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE:
		return "date", true
	case gomysql.MYSQL_TYPE_TIME2:
		return withFraction("time", meta), true
	case gomysql.MYSQL_TYPE_DATETIME2:
		return withFraction("datetime", meta), true
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		return withFraction("timestamp", meta), true
	case gomysql.MYSQL_TYPE_JSON:
		return "json", true
	case gomysql.MYSQL_TYPE_GEOMETRY:
		return "geometry", true
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		if binary {
			return fmt.Sprintf("varbinary(%d)", meta), true
		}
		return fmt.Sprintf("varchar(%d)", meta), true
	case gomysql.MYSQL_TYPE_BLOB:
		if binary {
			return "blob", true
		}
		return "text", true
	case gomysql.MYSQL_TYPE_STRING:
		switch byte(meta >> 8) {
		case gomysql.MYSQL_TYPE_ENUM:
			return "enum(" + quoteMembers(enum) + ")", len(enum) > 0
		case gomysql.MYSQL_TYPE_SET:
			return "set(" + quoteMembers(set) + ")", len(set) > 0
		}
		// CHAR and BINARY: the length's high bits ride in the real type.
		n := int((meta>>4)&0x300^0x300) + int(meta&0xff)
		if binary {
			return fmt.Sprintf("binary(%d)", n), true
		}
		return fmt.Sprintf("char(%d)", n), true
	}
	return "", false
}

func withFraction(base string, fsp uint16) string {
	if fsp == 0 {
		return base
	}
	return fmt.Sprintf("%s(%d)", base, fsp)
}

// quoteMembers writes ENUM or SET members as the catalog does: 'a','b”c'.
func quoteMembers(members []string) string {
	q := make([]string, len(members))
	for i, m := range members {
		q[i] = "'" + strings.ReplaceAll(m, "'", "''") + "'"
	}
	return strings.Join(q, ",")
}

// resets are the TRUNCATEs of the tables added to the changefeed before
// position ts (tableState.ResetAt), in name order, each a new table
// version, to go before the transaction at ts; and the tables with them.
//
// A table added where the binary log ended then (AddedAt) is truncated at
// the first transaction after that point (covered says one is not yet),
// not at its ResetAt: the table removed in the same pause had its
// partitions write up to where it was held, which may be well after the
// changefeed's checkpoint (ResetAt), and those rows of the table as it
// was, after a TRUNCATE at the checkpoint, stayed in the sink.
func resets(tables map[string]tableState, held map[string]bool, ts model.Ts, covered func(tableState) bool) (map[string]tableState, []*source.Event) {
	due := false
	for _, st := range tables { // every transaction: no sort, no allocation while none is due
		due = due || st.ResetAt != 0 && st.ResetAt < ts
	}
	if !due {
		return tables, nil
	}
	var out []*source.Event
	for _, t := range slices.Sorted(maps.Keys(tables)) {
		st := tables[t]
		if st.ResetAt == 0 || st.ResetAt >= ts || held[t] || covered(st) {
			continue
		}
		st.Version++
		st.ResetAt = 0
		tables = withTable(tables, t, st)
		out = append(out, &source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
			Statement: source.TruncatePrefix + quoteTable(t)})
	}
	return tables, out
}
