package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Schema changes are followed at the first row written after them: its
// table map (the binary log's description of the columns the row has:
// their names with binlog_row_metadata=FULL, always their types) is
// compared with the schema the reader holds. When they differ, or an
// ALTER TABLE named the table since, the catalog is read: if it agrees
// with the table map (same columns, same names, compatible types), it is
// the row's schema, and a schema change event goes before the row. If it
// does not (the reader is behind several schema changes, and the
// catalog already shows a later one), the table is held, never decoded
// with a schema that is not its rows': following schema history through
// such a gap comes next (docs/mysql.md).

// followable says whether a statement naming a replicated table changes
// what its rows look like in a way the next row's table map shows: ALTER
// TABLE other than a rename, and index changes. A rename, a drop, a
// TRUNCATE (rows removed without row events) and anything else hold the
// table.
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

// mapMatches says whether a row's table map describes the schema the
// reader holds for its table: as many columns, the same names (when the
// map carries them) and types of the same family.
func mapMatches(tm *replication.TableMapEvent, def *source.TableDef) bool {
	if int(tm.ColumnCount) != len(def.Columns) {
		return false
	}
	names := tm.ColumnNameString()
	for i, c := range def.Columns {
		if len(names) == len(def.Columns) && !strings.EqualFold(names[i], c.Name) {
			return false
		}
		if !typeFits(tm, i, c.Type) {
			return false
		}
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
		return base == "char" || base == "binary"
	case gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
		return strings.HasSuffix(base, "blob") || strings.HasSuffix(base, "text") || base == "json" || base == "longtext"
	case gomysql.MYSQL_TYPE_GEOMETRY:
		return base == "geometry" || base == "point" || base == "linestring" || base == "polygon"
	}
	return true // a type this check does not know: the catalog's word
}

// followSchema reads a table's schema from the catalog for a row whose
// table map differs from what the reader holds (or after an ALTER
// TABLE). It returns the table's new state and the schema change event
// to write before the row (nil when nothing changed), or why the table
// must be held.
func followSchema(ctx context.Context, db *sql.DB, table string, st tableState, tm *replication.TableMapEvent, stmt string) (tableState, *source.Event, string) {
	def, charsets, err := tableDef(ctx, db, table)
	if err != nil {
		return st, nil, fmt.Sprintf("its schema changed and the catalog cannot be read: %v; fix the cause, then resume the changefeed", err)
	}
	if !mapMatches(tm, def) {
		return st, nil, "its schema changed more than once since the rows the reader reads now were written (the catalog shows a later schema than theirs): following schema history through such a gap is not built yet; remove the changefeed and create it again (docs/mysql.md)"
	}
	if sameColumns(st.Def, def) {
		return st, nil, ""
	}
	if strings.Join(st.Def.KeyNames(), ",") != strings.Join(def.KeyNames(), ",") || keyTypes(st.Def) != keyTypes(def) {
		return st, nil, fmt.Sprintf("its primary key changed (%s to %s): its partitions are ranges of the old key; remove the changefeed and create it again (docs/mysql.md)",
			strings.Join(st.Def.KeyNames(), ","), strings.Join(def.KeyNames(), ","))
	}
	if stmt == "" {
		stmt = "ALTER TABLE " + quoteTable(table) + " -- columns changed"
	}
	next := tableState{Def: def, Since: st.Since, Version: st.Version + 1, Charsets: charsets}
	ev := source.Event{Kind: source.KindDDL, Table: table, Def: def, SchemaVersion: next.Version, Statement: stmt}
	return next, &ev, ""
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
