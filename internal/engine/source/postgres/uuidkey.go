package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table keyed by one uuid column is routed, like any key that is not an
// integer, by the bytes of the key's text; a chunk selected and ordered by
// that text (`id::text COLLATE "C"`) is read by scanning and sorting the
// whole rest of the table, for every chunk: a snapshot of such a table
// cost chunks × rows. But a uuid's text is its 16 bytes in lowercase hex
// at fixed places, so the uuid's own order (the key index's) is the
// order of its text: the chunk is read from the index, in that order,
// between bounds on the uuid itself that the text bounds imply
// (uuidCeil), with the text bounds kept as the exact filter. It returns
// the same rows as the text query, from a range scan of the index.

// uuidKey says a table's key is one uuid column.
func uuidKey(def *source.TableDef) bool {
	keys := def.KeyNames()
	return len(keys) == 1 && def.Columns[def.Index(keys[0])].Type == "uuid"
}

// uuidRangeQuery is rangeQuery for a table keyed by one uuid column.
func uuidRangeQuery(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
	k := def.KeyNames()[0]
	col := pgx.Identifier{k}.Sanitize()
	bounds, err := source.ChunkBounds(span, copied)
	if err != nil {
		return "", nil, nil, err
	}
	var conds []string
	var args []any
	param := func(v string) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	for _, b := range bounds {
		v := b.Vals[0]
		conds = append(conds, fmt.Sprintf(`%s::text COLLATE "C" %s %s`, col, b.Op, param(v)))
		// text ≥ v or > v implies uuid ≥ ceil(v); text < v implies
		// uuid < ceil(v). Without a ceiling (v above every uuid's text)
		// the text bound alone decides.
		if u, ok := uuidCeil(v); ok {
			native := ">="
			if b.Op == "<" {
				native = "<"
			}
			conds = append(conds, fmt.Sprintf(`%s %s %s::text::uuid`, col, native, param(u)))
		}
	}
	q := fmt.Sprintf("SELECT %s FROM %s", columnList(def), quoteQualified(span.Table))
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	return q + fmt.Sprintf(" ORDER BY %s LIMIT %d", col, limit), args, []int{def.Index(k)}, nil
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
