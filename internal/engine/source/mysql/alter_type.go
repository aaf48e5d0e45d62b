package mysql

import (
	"strconv"
	"strings"
)

// dataType reads a column's type as the catalog writes it: the base
// name in lower case with aliases resolved, its arguments, UNSIGNED and
// ZEROFILL; an integer's display width as the statement gives it (the
// server's own default is the flavor's: asCatalog).
func (r *alterReader) dataType() (typ string, textual bool, charset string, ok bool) {
	t := r.peek(0)
	if t.kind != 'w' {
		return "", false, "", false
	}
	r.i++
	base := strings.ToLower(t.text)
	switch {
	case base == "double" && r.accept("precision"):
	case base == "character" && r.accept("varying"), base == "char" && r.accept("varying"):
		base = "varchar"
	case base == "national":
		switch {
		case r.accept("char", "varying"), r.accept("character", "varying"), r.accept("varchar"):
			base = "varchar"
		case r.accept("char"), r.accept("character"):
			base = "char"
		default:
			return "", false, "", false
		}
		charset = "utf8mb4"
	case base == "nchar" && r.accept("varying"), base == "nvarchar":
		base, charset = "varchar", "utf8mb4"
	case base == "nchar":
		base, charset = "char", "utf8mb4"
	case base == "long":
		base = "mediumtext" // LONG and LONG VARCHAR
		if r.accept("varbinary") {
			base = "mediumblob"
		} else {
			r.accept("varchar")
		}
	}
	var args []string
	if r.punct("(") {
		for {
			a := r.peek(0)
			switch a.kind {
			case 's':
				args = append(args, "'"+strings.ReplaceAll(a.text, "'", "''")+"'")
			case 'w':
				if _, err := strconv.Atoi(a.text); err != nil {
					return "", false, "", false
				}
				args = append(args, a.text)
			default:
				return "", false, "", false
			}
			r.i++
			if r.punct(")") {
				break
			}
			if !r.punct(",") {
				return "", false, "", false
			}
		}
	}
	withArgs := func(b string) string {
		if len(args) == 0 {
			return b
		}
		return b + "(" + strings.Join(args, ",") + ")"
	}
	switch base {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "integer", "int1", "int2", "int3", "int4", "int8", "middleint":
		if alias, ok := intAliases[base]; ok {
			base = alias
		}
		if len(args) > 1 {
			return "", false, "", false
		}
		typ = withArgs(base)
	case "bool", "boolean":
		typ = "tinyint(1)"
	case "serial":
		return "", false, "", false // BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE: the catalog's word
	case "decimal", "dec", "numeric", "fixed":
		switch len(args) {
		case 0:
			args = []string{"10", "0"}
		case 1:
			args = append(args, "0")
		}
		typ = withArgs("decimal")
	case "float":
		switch len(args) {
		case 1:
			if p, _ := strconv.Atoi(args[0]); p > 24 {
				typ = "double"
			} else {
				typ = "float"
			}
		default:
			typ = withArgs("float")
		}
	case "double", "real", "float8":
		typ = withArgs("double")
	case "float4":
		typ = withArgs("float")
	case "bit", "char", "binary":
		if len(args) == 0 {
			args = []string{"1"}
		}
		typ = withArgs(base)
		textual = base == "char"
	case "varchar", "varbinary":
		if len(args) != 1 {
			return "", false, "", false
		}
		typ = withArgs(base)
		textual = base == "varchar"
	case "tinytext", "text", "mediumtext", "longtext":
		if len(args) > 0 {
			// TEXT(M): the server makes it the smallest TEXT type that
			// holds M characters, in bytes of the column's character set
			// (TEXT(50) in utf8mb4 is a TINYTEXT): not followed, the
			// catalog decides. Written "text", it never matched the
			// catalog, and a copy read every chunk again for good.
			return "", false, "", false
		}
		typ, textual = base, true
	case "tinyblob", "blob", "mediumblob", "longblob":
		typ = base
		if base == "blob" && len(args) == 1 {
			// BLOB(M): the smallest BLOB type that holds M bytes.
			n, err := strconv.ParseUint(args[0], 10, 64)
			switch {
			case err != nil:
				return "", false, "", false
			case n < 1<<8:
				typ = "tinyblob"
			case n < 1<<16:
				typ = "blob"
			case n < 1<<24:
				typ = "mediumblob"
			default:
				typ = "longblob"
			}
		}
	case "enum", "set":
		if len(args) == 0 {
			return "", false, "", false
		}
		typ, textual = withArgs(base), true
	case "date", "year":
		typ = base
	case "time", "datetime", "timestamp":
		if len(args) == 1 && args[0] == "0" {
			args = nil
		}
		typ = withArgs(base)
	case "json":
		typ = "json"
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection":
		typ = base
	default:
		return "", false, "", false
	}
	for {
		switch {
		case r.accept("unsigned"):
			if !strings.Contains(typ, " unsigned") {
				typ += " unsigned"
			}
		case r.accept("signed"):
		case r.accept("zerofill"):
			if !strings.Contains(typ, " unsigned") {
				typ += " unsigned"
			}
			typ += " zerofill"
		case r.accept("binary"): // the character set's binary collation
		case r.accept("ascii"):
			charset = "latin1"
		case r.accept("unicode"):
			charset = "ucs2"
		case r.accept("byte"):
			// CHARACTER SET binary: a binary type; the catalog decides.
			return "", false, "", false
		case r.is("character", "set"), r.is("charset"), r.is("collate"):
			cs, ok := r.charset()
			if !ok {
				return "", false, "", false
			}
			charset = cs
		default:
			return typ, textual, charset, true
		}
	}
}

// intAliases are the integer types' other names.
var intAliases = map[string]string{"integer": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint", "int4": "int", "int8": "bigint", "middleint": "mediumint"}
