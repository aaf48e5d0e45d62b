package source

import (
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ChunkBound is one bound of a chunk's key range: the comparison of the
// key's row with the bound ("<", "<=", ">=", ">") and the bound's key
// values.
type ChunkBound struct {
	Op   string
	Vals []string
}

// ChunkBounds are the bounds of a span's next chunk: above what is copied
// (or from the span's start) and below the span's end, or at or below
// the copy's horizon where that comes first; none when the span is open
// on both sides and nothing is copied.
func ChunkBounds(span model.Span, copied model.CopyProgress) ([]ChunkBound, error) {
	var out []ChunkBound
	add := func(op, enc string) error {
		vals, err := model.DecodeKeyValues(span.Key, enc)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, err)
		}
		out = append(out, ChunkBound{Op: op, Vals: vals})
		return nil
	}
	if after, ok := copied.After(); ok {
		if err := add(">", after); err != nil {
			return nil, err
		}
	} else if span.Start != "" {
		if err := add(">=", span.Start); err != nil {
			return nil, err
		}
	}
	if h := copied.Horizon; h != "" && (span.End == "" || h < span.End) {
		if err := add("<=", h); err != nil {
			return nil, err
		}
	} else if span.End != "" {
		if err := add("<", span.End); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RangeQuery is the SELECT of a chunk: cols of table, the next rows of a
// span in key order (exprs: the key columns as routing orders them)
// after what is copied (or from the span's start), up to the copy's
// horizon, at most limit.
// literal writes the i-th key value of a bound as the database takes it
// (a parameter placeholder, or a literal).
func RangeQuery(cols, table string, exprs []string, span model.Span, copied model.CopyProgress, limit int, literal func(i int, v string) (string, error)) (string, error) {
	return rangeQuery(cols, table, exprs, span, copied, limit, "", literal)
}

// LastRowQuery is the SELECT of the last row RangeQuery would read of the
// span after what is copied: its key, in a full chunk's snapshot, is the
// copy's horizon (model.CopyProgress.Horizon).
func LastRowQuery(cols, table string, exprs []string, span model.Span, copied model.CopyProgress, literal func(i int, v string) (string, error)) (string, error) {
	return rangeQuery(cols, table, exprs, span, copied, 1, " DESC", literal)
}

// OrderBy writes an ORDER BY of exprs, each in direction dir ("" or
// " DESC"), and a LIMIT.
func OrderBy(exprs []string, dir string, limit int) string {
	var b strings.Builder
	b.WriteString(" ORDER BY ")
	for i, e := range exprs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e + dir)
	}
	return b.String() + fmt.Sprintf(" LIMIT %d", limit)
}

func rangeQuery(cols, table string, exprs []string, span model.Span, copied model.CopyProgress, limit int, dir string, literal func(i int, v string) (string, error)) (string, error) {
	bounds, err := ChunkBounds(span, copied)
	if err != nil {
		return "", err
	}
	row := "(" + strings.Join(exprs, ", ") + ")"
	var conds []string
	for _, b := range bounds {
		ph := make([]string, len(b.Vals))
		for i, v := range b.Vals {
			if ph[i], err = literal(i, v); err != nil {
				return "", fmt.Errorf("snapshot of %s: %w", span.Table, err)
			}
		}
		conds = append(conds, fmt.Sprintf("%s %s (%s)", row, b.Op, strings.Join(ph, ", ")))
	}
	q := fmt.Sprintf("SELECT %s FROM %s", cols, table)
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	return q + OrderBy(exprs, dir, limit), nil
}
