package postgres

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A key with uuid columns is routed, like any key that is not an
// integer, by the bytes of its text; a chunk selected and ordered by that
// text (`id::text COLLATE "C"`) is read by scanning and sorting the whole
// rest of the partition, for every chunk: a snapshot of such a table cost
// chunks × rows. But a uuid's text is its 16 bytes in lowercase hex at
// fixed places, so the uuid's own order (the key index's) is the order of
// its text: where each other column of the key is an integer or text an
// index orders by its bytes (byteOrder), the chunk is read from the
// index, ordered by the uuids themselves, between bounds on the key's
// row in the uuids' terms (uuidBound), with the text bounds kept as the
// exact filter. It returns the same rows as the text query, from a range
// scan of the index: one uuid (`id uuid PRIMARY KEY`), or a tenant's
// uuid before its rows' ids (`PRIMARY KEY (tenant uuid, id int8)`).

// uuidColumn says a key column is a uuid.
func uuidColumn(col source.ColumnDef) bool { return col.Type == "uuid" }

// uuidKey says a table's key has a uuid column.
func uuidKey(def *source.TableDef) bool {
	for _, k := range def.KeyNames() {
		if uuidColumn(def.Columns[def.Index(k)]) {
			return true
		}
	}
	return false
}

// uuidRangeQuery is rangeQuery for a key with uuid columns, the others
// ordered by an index (indexOrdered): the text query's bounds (exact), and
// the same bounds on the key's columns as they are (uuidBound), which
// the index's range scan reads, in the index's order.
func uuidRangeQuery(def *source.TableDef, order byteOrder, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
	exprs, keyIdx := keyOrder(def, order)
	native := make([]string, len(keyIdx))
	uuids := make([]bool, len(keyIdx))
	for i, j := range keyIdx {
		native[i] = exprs[i]
		if uuids[i] = uuidColumn(def.Columns[j]); uuids[i] {
			native[i] = pgx.Identifier{def.Columns[j].Name}.Sanitize()
		}
	}
	bounds, err := source.ChunkBounds(span, copied)
	if err != nil {
		return "", nil, nil, err
	}
	var conds []string
	var args []any
	param := func(v string, uuid bool) string {
		args = append(args, v)
		if uuid {
			return fmt.Sprintf("$%d::text::uuid", len(args))
		}
		return fmt.Sprintf("$%d", len(args))
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
			ph[i] = param(v, false)
		}
		conds = append(conds, row(exprs, ph, b.Op))
		op, n, vals := uuidBound(b, uuids)
		switch {
		case op == "":
			continue
		case n == 0:
			conds = append(conds, op)
			continue
		}
		for i := range n {
			ph[i] = param(vals[i], uuids[i])
		}
		conds = append(conds, row(native[:n], ph[:n], op))
	}
	q := fmt.Sprintf("SELECT %s FROM %s", columnList(def), quoteQualified(span.Table))
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	return q + fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(native, ", "), limit), args, keyIdx, nil
}

// uuidBound is a chunk's bound b on the key's text as a bound on the
// key's columns as they are (uuids marks the uuid columns): the row of
// its first n columns compared by op with vals. The text bound compares
// each uuid by its text; a bound value that is a uuid's text (as
// PostgreSQL writes it) compares the same as that uuid, so the bound
// holds as it is. A value v that is not (a split key "8") cuts the row
// there: a uuid's text is above v exactly when the uuid is at or above
// the least uuid whose text is above v (uuidCeil), and below v when
// below it, whatever the columns after. Where every uuid's text is
// below v, the columns before decide alone: n is then that prefix, op
// "<=" or ">", and at the key's first column op is "FALSE" or "" (no
// condition), with n 0.
func uuidBound(b source.ChunkBound, uuids []bool) (op string, n int, vals []string) {
	vals = slices.Clone(b.Vals)
	for j, v := range b.Vals {
		if !uuids[j] {
			continue
		}
		u, ok := uuidCeil(v)
		switch {
		case ok && u == v:
			continue
		case ok && b.Op == "<":
			vals[j] = u
			return "<", j + 1, vals
		case ok:
			vals[j] = u
			return ">=", j + 1, vals
		case j == 0 && b.Op == "<":
			return "", 0, nil
		case j == 0:
			return "FALSE", 0, nil
		case b.Op == "<":
			return "<=", j, vals
		default:
			return ">", j, vals
		}
	}
	return b.Op, len(b.Vals), vals
}

// uuidCeil returns the least uuid whose text (lowercase hex, hyphens at
// 8, 13, 18 and 23) is at or above v in byte order; false when every
// uuid's text is below v.
func uuidCeil(v string) (string, bool) {
	const n = 36
	u := make([]byte, n)
	// i is how far u equals v; then u needs, at i, the least character
	// allowed there above v[i] (and the least of each after), or, if none,
	// the same at an earlier place.
	i := 0
	for ; i < n && i < len(v) && allowed(i, v[i]); i++ {
		u[i] = v[i]
	}
	if i == n && len(v) == n {
		return v, true
	}
	if i == len(v) && i < n {
		fillLeast(u, i) // v is a prefix of u: u > v
		return string(u), true
	}
	// Raise position j (i, then earlier) to a character above v[j].
	for j := min(i, n-1); j >= 0; j-- {
		var c byte
		if j < len(v) {
			c = v[j]
		}
		if next, ok := nextAllowed(j, c); ok {
			u[j] = next
			fillLeast(u, j+1)
			return string(u), true
		}
	}
	return "", false
}

func hyphenAt(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }

func allowed(i int, c byte) bool {
	if hyphenAt(i) {
		return c == '-'
	}
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// nextAllowed is the least character allowed at i above c.
func nextAllowed(i int, c byte) (byte, bool) {
	for _, x := range []byte("-0123456789abcdef") {
		if x > c && allowed(i, x) {
			return x, true
		}
	}
	return 0, false
}

func fillLeast(u []byte, from int) {
	for i := from; i < len(u); i++ {
		if hyphenAt(i) {
			u[i] = '-'
		} else {
			u[i] = '0'
		}
	}
}
