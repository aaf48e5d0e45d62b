package postgres

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A chunk's rows come in routing order: an integer key column by its
// value, any other by the bytes of its text. Where the key's index gives
// that order for the key's first columns, a chunk is read from the index
// instead of sorting the rest of its partition's range: an integer, text
// an index orders by its bytes (textkey.go), a uuid (whose text's order
// is its own, uuidkey.go), and a date or timestamp first in the key
// where its text is in time order (timekey.go). Such a column is bounded
// as it is, besides the exact bounds on the key's text, which stay in
// the query: a bound on the columns as they are only narrows what the
// index reads, and never leaves out a row the text bounds keep
// (nativeBound). Where the index gives only the first columns, the rest
// are sorted within each of their values (an incremental sort), not the
// partition's whole range.

// readOrder is how a chunk's rows come in routing order.
type readOrder int

const (
	// sortedOrder: the key's first column is not in its index's order;
	// each chunk sorts the rest of its partition's range.
	sortedOrder readOrder = iota
	// prefixOrder: the index gives the key's first columns; the rest are
	// sorted within each of their values.
	prefixOrder
	// indexOrder: the index gives every column of the key.
	indexOrder
)

// nativeColumn is a key column a chunk reads in its index's order: how
// the chunk names it (expr), what a bound value is cast to before it is
// compared with it (cast), and how a bound on its text bounds it as it is
// (cut).
type nativeColumn struct {
	expr, cast string
	cut        func(v string) cut
}

// cut is how a bound value of one key column bounds the column as it is.
// exact: the value is a value's own text, which compares with any other
// value's text as the two values compare: the bound holds as it is.
// Otherwise, every value whose text is at or above the bound value is at
// or above lower (when hasLower), and every value whose text is below it
// is below upper (when hasUpper); none: no value's text is at or above
// it. Without a lower or upper cut the column is not bounded on that
// side (a bound that reads more than it keeps, never less).
type cut struct {
	exact              bool
	lower, upper       string
	hasLower, hasUpper bool
	none               bool
}

// exactCut is the cut of a column whose every bound value compares as
// its text does (an integer, text in its index's order).
func exactCut(string) cut { return cut{exact: true} }

// nativePrefix is the key's first columns that its index gives in routing
// order, as a chunk reads them; timeLead says the first column, a date or
// a timestamp, is in the order of its text in this chunk's snapshot
// (timeOrdered).
func nativePrefix(def *source.TableDef, order byteOrder, timeLead bool) []nativeColumn {
	var out []nativeColumn
	for i, k := range def.KeyNames() {
		col := def.Columns[def.Index(k)]
		name := pgx.Identifier{k}.Sanitize()
		switch kind := timeKind(col); {
		case intColumn(col):
			out = append(out, nativeColumn{expr: name, cut: exactCut})
		case order.has(k):
			out = append(out, nativeColumn{expr: name + order[k], cut: exactCut})
		case uuidColumn(col):
			out = append(out, nativeColumn{expr: name, cast: "::text::uuid", cut: uuidCut})
		case i == 0 && timeLead && kind != "":
			out = append(out, nativeColumn{expr: name, cast: "::text::" + kind, cut: func(v string) cut { return timeCut(kind, v) }})
		default:
			return out
		}
	}
	return out
}

// orderOf is how a chunk of the table reads its rows in routing order.
func orderOf(def *source.TableDef, order byteOrder, timeLead bool) readOrder {
	switch n := len(nativePrefix(def, order, timeLead)); {
	case n == 0:
		return sortedOrder
	case n < len(def.KeyNames()):
		return prefixOrder
	}
	return indexOrder
}

// nativeRangeQuery is rangeQuery for a key whose first columns are read in
// their index's order and need bounds of their own (a uuid, a time): the
// text query's bounds (exact), the same bounds on those columns as they
// are (nativeBound), which the index's range scan reads, in the index's
// order, then the key's other columns in routing order.
func nativeRangeQuery(from string, def *source.TableDef, order byteOrder, prefix []nativeColumn, span model.Span, copied model.CopyProgress, limit int, dir string) (string, []any, []int, error) {
	exprs, keyIdx := keyOrder(def, order)
	bounds, err := source.ChunkBounds(span, copied)
	if err != nil {
		return "", nil, nil, err
	}
	native := make([]string, len(prefix))
	cuts := make([]func(string) cut, len(prefix))
	for i, c := range prefix {
		native[i], cuts[i] = c.expr, c.cut
	}
	var conds []string
	var args []any
	param := func(v, cast string) string {
		args = append(args, v)
		return fmt.Sprintf("$%d%s", len(args), cast)
	}
	row := func(exprs, ph []string, op string) string {
		return fmt.Sprintf("(%s) %s (%s)", strings.Join(exprs, ", "), op, strings.Join(ph, ", "))
	}
	for _, b := range bounds {
		if len(b.Vals) != len(keyIdx) {
			return "", nil, nil, fmt.Errorf("snapshot of %s: the partition's key has %d columns, the table's primary key %d now: its changefeed was created with another key", span.Table, len(b.Vals), len(keyIdx))
		}
		ph := make([]string, len(b.Vals))
		for i, v := range b.Vals {
			ph[i] = keyParam(def, order, i, v, &args)
		}
		conds = append(conds, row(exprs, ph, b.Op))
		op, n, vals := nativeBound(b, cuts)
		switch {
		case op == "":
			continue
		case n == 0:
			conds = append(conds, op)
			continue
		}
		for i := range n {
			ph[i] = param(vals[i], prefix[i].cast)
		}
		conds = append(conds, row(native[:n], ph[:n], op))
	}
	q := fmt.Sprintf("SELECT %s FROM %s", columnList(def), from)
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	orderBy := append(native, exprs[len(native):]...)
	return q + source.OrderBy(orderBy, dir, limit), args, keyIdx, nil
}

// nativeBound is a chunk's bound b on the key's text as a bound on the
// key's first columns as they are (cuts: how a bound value bounds each):
// the row of its first n columns compared by op with vals. While the
// bound's values are exact (a value's own text), they hold as they are;
// at the first that is not, the row is cut there (a lower bound: at or
// above its lower cut; an upper one: below its upper cut), the columns
// after it no longer matter. Where no value's text is at or above it,
// the columns before decide alone: n is then that prefix, op ">" (a
// lower bound) or "<=" (an upper one), and at the key's first column op
// is "FALSE" or "" (no condition), with n 0; a side without a cut is the
// columns before, at or above (at or below) theirs. Where the cuts end
// before the key does (its other columns are sorted), the prefix is
// compared the same way: at or above, at or below.
func nativeBound(b source.ChunkBound, cuts []func(string) cut) (op string, n int, vals []string) {
	vals = slices.Clone(b.Vals)
	upper := b.Op[0] == '<'
	prefix := func(j int, strict bool) (string, int, []string) {
		switch {
		case j == 0 && strict && !upper:
			return "FALSE", 0, nil
		case j == 0:
			return "", 0, nil
		case upper:
			return "<=", j, vals
		case strict:
			return ">", j, vals
		}
		return ">=", j, vals
	}
	for j, cutOf := range cuts {
		c := cutOf(b.Vals[j])
		switch {
		case c.exact:
			continue
		case c.none && !upper:
			return prefix(j, true)
		case upper && c.hasUpper:
			vals[j] = c.upper
			return "<", j + 1, vals
		case !upper && c.hasLower:
			vals[j] = c.lower
			return ">=", j + 1, vals
		}
		return prefix(j, false)
	}
	if len(cuts) < len(b.Vals) {
		return prefix(len(cuts), false)
	}
	return b.Op, len(b.Vals), vals
}
