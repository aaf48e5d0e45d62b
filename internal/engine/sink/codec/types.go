package codec

import (
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/row"
)

// columnType is how canal-json describes a column: the java.sql.Types
// code (sqlType) and the MySQL type name (mysqlType) that consumers of
// TiCDC's and Canal's output expect.
type columnType struct {
	sqlType   int
	mysqlType string
}

// java.sql.Types codes.
const (
	sqlBit         = -7
	sqlTinyInt     = -6
	sqlSmallInt    = 5
	sqlInteger     = 4
	sqlBigInt      = -5
	sqlReal        = 7
	sqlDouble      = 8
	sqlDecimal     = 3
	sqlChar        = 1
	sqlVarchar     = 12
	sqlDate        = 91
	sqlTime        = 92
	sqlTimestamp   = 93
	sqlBinary      = -2
	sqlVarBinary   = -3
	sqlBlob        = 2004
	sqlClob        = 2005
	sqlBoolean     = 16
	sqlArray       = 2003
	sqlOther       = 1111
	sqlTimestampTZ = 2014
)

// typeOf maps an upstream type name (PostgreSQL's, with modifiers, as
// source.ColumnDef carries it) to canal-json's description. Types it does
// not know are described as text: their values are the upstream's text
// form anyway.
func typeOf(t string) columnType {
	base, mods, _ := strings.Cut(t, "(")
	if mods != "" {
		mods = "(" + mods
	}
	if strings.HasPrefix(base, "_") || strings.HasSuffix(base, "[]") {
		return columnType{sqlArray, "text"}
	}
	switch base {
	case "int2", "smallint", "smallserial":
		return columnType{sqlSmallInt, "smallint"}
	case "int4", "integer", "int", "serial":
		return columnType{sqlInteger, "int"}
	case "int8", "bigint", "bigserial":
		return columnType{sqlBigInt, "bigint"}
	case "numeric", "decimal":
		return columnType{sqlDecimal, "decimal" + mods}
	case "float4", "real":
		return columnType{sqlReal, "float"}
	case "float8", "double precision":
		return columnType{sqlDouble, "double"}
	case "bool", "boolean":
		return columnType{sqlBoolean, "tinyint(1)"}
	case "varchar", "character varying":
		return columnType{sqlVarchar, "varchar" + mods}
	case "bpchar", "char", "character":
		return columnType{sqlChar, "char" + mods}
	case "text", "name", "citext":
		return columnType{sqlClob, "text"}
	case "bytea":
		return columnType{sqlBlob, "blob"}
	case "date":
		return columnType{sqlDate, "date"}
	case "time", "timetz":
		return columnType{sqlTime, "time"}
	case "timestamp":
		return columnType{sqlTimestamp, "datetime"}
	case "timestamptz":
		return columnType{sqlTimestampTZ, "timestamp"}
	case "json", "jsonb":
		return columnType{sqlVarchar, "json"}
	case "uuid":
		return columnType{sqlChar, "char(36)"}
	case "tinyint":
		return columnType{sqlTinyInt, "tinyint"}
	case "binary", "varbinary":
		return columnType{sqlBinary, base + mods}
	}
	return columnType{sqlOther, "text"}
}

// MySQLType is the MySQL type name an upstream type of a dialect
// (row.TableDef.Dialect) is shown as, with its modifiers: "varchar(16)",
// "decimal(10,2)", "bigint"; a MySQL column's own type as it is.
func MySQLType(dialect, t string) string { return typeIn(dialect, t).mysqlType }

// typeIn is typeOf for a column of a dialect.
func typeIn(dialect, t string) columnType {
	if dialect == row.DialectMySQL {
		return mysqlTypeOf(t)
	}
	return typeOf(t)
}

// mysqlTypeOf describes a MySQL column as Canal does: its COLUMN_TYPE
// as the server shows it ("int(10) unsigned", "enum('a','b')") and the
// java.sql.Types code of its base type.
func mysqlTypeOf(t string) columnType {
	t = strings.ToLower(strings.TrimSpace(t))
	base := t
	if i := strings.IndexAny(base, "( "); i >= 0 {
		base = base[:i]
	}
	code := sqlOther
	switch base {
	case "tinyint":
		code = sqlTinyInt
	case "smallint":
		code = sqlSmallInt
	case "mediumint", "int", "integer":
		code = sqlInteger
	case "bigint":
		code = sqlBigInt
	case "decimal", "numeric":
		code = sqlDecimal
	case "float":
		code = sqlReal
	case "double", "real":
		code = sqlDouble
	case "bit", "set":
		code = sqlBit
	case "enum":
		code = sqlInteger
	case "date":
		code = sqlDate
	case "datetime", "timestamp":
		code = sqlTimestamp
	case "time":
		code = sqlTime
	case "year", "varchar", "json":
		code = sqlVarchar
	case "char":
		code = sqlChar
	case "tinytext", "text", "mediumtext", "longtext":
		code = sqlClob
	case "binary":
		code = sqlBinary
	case "varbinary":
		code = sqlVarBinary
	case "tinyblob", "blob", "mediumblob", "longblob":
		code = sqlBlob
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection":
		code = sqlBinary
	}
	return columnType{code, t}
}

// bitWidth is a MySQL BIT(n) column's n (its mysqlType, "bit(64)"), 0 for
// any other column. Its values are their bytes, big-endian; canal-json
// writes them as Canal does, the unsigned number in decimal (canalbits.go).
// (PostgreSQL's bit and varbit, whose text is their 0s and 1s, are
// described as text.)
func bitWidth(mysqlType string) int {
	rest, ok := strings.CutPrefix(mysqlType, "bit")
	if !ok {
		return 0
	}
	if rest == "" {
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "("), ")"))
	if err != nil || !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") || n < 1 || n > 64 {
		return 0
	}
	return n
}
