package mysql

import (
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// apply makes the statement's column changes to def (its character
// columns' sets in charsets, by index); defaultCharset gives the table's
// default character set for a character column that names none. It
// returns false when a change does not fit the definition (a column that
// is not there, one added twice), which the server would have refused:
// the reader then does not know the table's schema from the statement.
func (a alterTable) apply(def *source.TableDef, charsets map[int]string, flavor string, defaultCharset func() (string, bool)) (*source.TableDef, map[int]string, bool) {
	type col struct {
		def     source.ColumnDef
		charset string
	}
	cols := make([]col, len(def.Columns))
	for i, c := range def.Columns {
		cols[i] = col{c, charsets[i]}
	}
	find := func(name string) int {
		return slices.IndexFunc(cols, func(c col) bool { return strings.EqualFold(c.def.Name, name) })
	}
	build := func(c colDef, keyPos int) (col, bool) {
		typ := asCatalog(c.typ, flavor)
		if typ == "json" && flavor == "mariadb" {
			typ = "longtext" // MariaDB's JSON is a LONGTEXT with a check
		}
		out := col{def: source.ColumnDef{Name: c.name, Type: typ, Nullable: c.nullable && keyPos == 0, KeyPos: keyPos}}
		if c.textual {
			cs := c.charset
			if cs == "" {
				var ok bool
				if cs, ok = defaultCharset(); !ok {
					return out, false
				}
			}
			if cs == "binary" {
				// A character type in the binary set is a binary type
				// (VARCHAR → VARBINARY): the catalog decides.
				return out, false
			}
			if cs != "utf8mb4" {
				out.charset = cs
			}
		}
		return out, true
	}
	insert := func(c col, s alterSpec) bool {
		switch {
		case s.first:
			cols = slices.Insert(cols, 0, c)
		case s.after != "":
			at := find(s.after)
			if at < 0 {
				return false
			}
			cols = slices.Insert(cols, at+1, c)
		default:
			cols = append(cols, c)
		}
		return true
	}
	// The server finds the columns a clause changes among the table's
	// columns before the statement (CHANGE a b, CHANGE b a swaps two
	// names), and applying the clauses in turn finds them among the
	// columns the clauses before made: where the two could differ (a
	// clause changes a name an earlier one made), the statement is not
	// applied.
	made := map[string]bool{}
	for _, s := range a.specs {
		if s.op != "add" && made[strings.ToLower(s.name)] {
			return nil, nil, false
		}
		at := find(s.name)
		switch s.op {
		case "add":
			if at >= 0 {
				if s.ifExists {
					continue
				}
				return nil, nil, false
			}
			c, ok := build(s.col, 0)
			if !ok || !insert(c, s) {
				return nil, nil, false
			}
		case "drop":
			if at < 0 {
				if s.ifExists {
					continue
				}
				return nil, nil, false
			}
			cols = slices.Delete(cols, at, at+1)
		case "modify", "change":
			if at < 0 {
				if s.ifExists {
					continue
				}
				return nil, nil, false
			}
			if !strings.EqualFold(s.name, s.col.name) && find(s.col.name) >= 0 {
				return nil, nil, false // a name another column has
			}
			c, ok := build(s.col, cols[at].def.KeyPos)
			if !ok {
				return nil, nil, false
			}
			if s.first || s.after != "" {
				cols = slices.Delete(cols, at, at+1)
				if !insert(c, s) {
					return nil, nil, false
				}
			} else {
				cols[at] = c
			}
		case "rename":
			if at < 0 || find(s.col.name) >= 0 && !strings.EqualFold(s.name, s.col.name) {
				return nil, nil, false
			}
			cols[at].def.Name = s.col.name
		}
		if s.op == "add" || s.op == "change" || s.op == "rename" {
			made[strings.ToLower(s.col.name)] = true
		}
	}
	out := *def
	out.Columns = make([]source.ColumnDef, len(cols))
	var outCharsets map[int]string
	for i, c := range cols {
		out.Columns[i] = c.def
		if c.charset != "" {
			if outCharsets == nil {
				outCharsets = map[int]string{}
			}
			outCharsets[i] = c.charset
		}
	}
	return &out, outCharsets, true
}

// sameShape says whether the catalog's definition of a table is the one
// a statement's was applied to give: the same names, types (integer
// display widths aside), nullability, key and character sets. Then the
// catalog's is used, as the server writes its types.
func sameShape(a *source.TableDef, ac map[int]string, b *source.TableDef, bc map[int]string) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Nullable != y.Nullable || x.KeyPos != y.KeyPos || ac[i] != bc[i] ||
			withoutWidth(x.Type) != withoutWidth(y.Type) {
			return false
		}
	}
	return true
}

// withoutWidth writes a type without an integer's display width, in
// lower case: "int(11) unsigned" is "int unsigned".
func withoutWidth(typ string) string {
	t := strings.ToLower(typ)
	base, rest, ok := strings.Cut(t, "(")
	if !ok {
		return t
	}
	switch base {
	case "tinyint", "smallint", "mediumint", "int", "bigint":
		_, after, _ := strings.Cut(rest, ")")
		return base + after
	}
	return t
}

// asCatalog writes an integer or YEAR type as the server's catalog does,
// so that a column's type reads the same whether the schema history or
// the catalog gave it (a sink's schema files showed "int" and "int(11)"
// for one column): MariaDB with a display width, the statement's or the
// type's default ("int(11)", "int(10) unsigned", "year(4)"); MySQL 8
// without one, except TINYINT(1) and a ZEROFILL column's. Any other type
// is as it is.
func asCatalog(typ, flavor string) string {
	if typ == "year" && flavor == "mariadb" {
		return "year(4)"
	}
	head, rest, _ := strings.Cut(typ, " ")
	name, width, hasWidth := strings.Cut(head, "(")
	widths, ok := intWidths[name]
	if !ok {
		return typ
	}
	width = strings.TrimSuffix(width, ")")
	unsigned := strings.Contains(rest, "unsigned")
	switch {
	case flavor == "mariadb" || strings.Contains(rest, "zerofill"):
		if !hasWidth {
			width = widths[0]
			if unsigned {
				width = widths[1]
			}
		}
	case name == "tinyint" && width == "1":
	default:
		width = ""
	}
	if width != "" {
		name += "(" + width + ")"
	}
	if rest != "" {
		name += " " + rest
	}
	return name
}

// intWidths are the integer types' default display widths, signed and
// unsigned.
var intWidths = map[string][2]string{"tinyint": {"4", "3"}, "smallint": {"6", "5"}, "mediumint": {"9", "8"}, "int": {"11", "10"}, "bigint": {"20", "20"}}
