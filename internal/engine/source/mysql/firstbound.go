package mysql

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// firstColumnBound is the condition on a key's first column that every
// row of span meets, for a chunk read in the index's order: without it
// each partition of a table keyed by characters read every row of the
// table and kept its own, so a table cut into four was read four times
// over, through the network and the client. A span's keys are in byte
// order, and a key's bytes begin with its first column's own, so a row
// of the span has its first value between the span's first values (at
// or below the end's where the end goes on to more columns: the rows of
// that value may still be below it). The client still keeps the span's
// rows only (Chunk.Within): this condition only spares it the others.
//
//   - An integer first column (a key of it and a character column): a
//     range of its values, which the index reads as one.
//   - A character one, or a DECIMAL, a date or a time: its text
//     as UTF-8 bytes, which the server compares row by row as it reads
//     the index in its order (a collation's, or the values' own, which
//     their text is not always in: "10" before "9"); the text is what
//     the copy reads of the column (the server's rendering, in the
//     connection's utf8mb4), so no row of the span is left out.
//
// "" where the first column is of another kind (a BIGINT UNSIGNED has
// unsignedBound), or the span is the whole table.
func firstColumnBound(def *source.TableDef, span model.Span, col string) string {
	r := firstValues(def, span)
	literal := func(v string) string {
		if r.kind == kindInt {
			return v // digits, parsed by firstValues
		}
		return "X'" + hex.EncodeToString([]byte(v)) + "'"
	}
	expr := col
	if r.kind != kindInt {
		expr = "CAST(CONVERT(" + col + " USING utf8mb4) AS BINARY)"
	}
	var conds []string
	if r.hasLo {
		conds = append(conds, expr+" >= "+literal(r.lo))
	}
	if r.hasHi {
		op := " < "
		if r.hiToo {
			op = " <= "
		}
		conds = append(conds, expr+op+literal(r.hi))
	}
	return strings.Join(conds, " AND ")
}

// firstRange is the range of a key's first column that a span's rows
// are in: at or above lo, below hi (at or below, hiToo), each where
// there is one.
type firstRange struct {
	kind         keyKind
	lo, hi       string
	hasLo, hasHi bool
	hiToo        bool
}

// firstValues is the range of its key's first column that span's rows
// are in, where the column is an integer (of a key of more columns), or
// is filtered by its text; none otherwise.
func firstValues(def *source.TableDef, span model.Span) firstRange {
	keys := def.KeyNames()
	if len(keys) == 0 || span.Start == "" && span.End == "" {
		return firstRange{}
	}
	colType := def.Columns[def.Index(keys[0])].Type
	kind := keyKindOf(colType)
	switch {
	case strings.Contains(strings.ToLower(colType), "zerofill"), strings.HasPrefix(strings.ToLower(colType), "year"):
		// Text the copy does not read as the server writes it: a
		// ZEROFILL's padding; a YEAR the driver reads as a number (0,
		// where the server's text is "0000").
		return firstRange{}
	case kind == kindInt && len(keys) == 1:
		return firstRange{} // (an integer key alone is read in byte ranges)
	case kind != kindInt && kind != kindChars && kind != kindNumber && kind != kindTemporal:
		return firstRange{}
	}
	firstType, _, _ := strings.Cut(span.Key, ",")
	// first is the first column's value of a bound, and whether the bound
	// goes on to more columns; false where it does not decode as one (no
	// condition then: it only spares reading).
	first := func(enc string) (string, bool, bool) {
		comp, more := enc, false
		if len(keys) > 1 {
			// A bound may be of the first columns only (an operator's
			// split key).
			comp, _, more = strings.Cut(enc, "\x00")
		}
		vals, err := model.DecodeKeyValues(firstType, comp)
		if err != nil || len(vals) != 1 {
			return "", false, false
		}
		if kind == kindInt {
			if _, err := strconv.ParseInt(vals[0], 10, 64); err != nil {
				return "", false, false
			}
		}
		return vals[0], more, true
	}
	r := firstRange{kind: kind}
	if span.Start != "" {
		r.lo, _, r.hasLo = first(span.Start)
	}
	if span.End != "" {
		// The rows of the end's first value may be below it where it goes
		// on to more columns.
		r.hi, r.hiToo, r.hasHi = first(span.End)
	}
	return r
}
