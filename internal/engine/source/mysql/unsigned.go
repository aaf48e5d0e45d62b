package mysql

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A BIGINT UNSIGNED key routes as its digits (a uint64 is no int8), so a
// partition's range of it in bytes ("" to "5": 1-4, 10-49, 100-499, …) is
// no range of its index, and a partition copying one in the index's
// order read the whole table and kept its own rows: with four
// partitions, the table four times over. The numbers of each count of
// digits whose text falls in the range are one range of values, though
// (text of equal length orders as the numbers do): twenty at most, which
// the index reads in its order. A key whose first column is such is
// bounded by them (its other columns by the rows kept).

// unsignedRange is the values lo through hi of a BIGINT UNSIGNED column.
type unsignedRange struct{ lo, hi uint64 }

// unsignedRanges are the values of a BIGINT UNSIGNED column whose
// decimal text t is in the byte range from <= t < to ("" is open on its
// side), one range for each count of digits that has any, in order.
func unsignedRanges(from, to string) []unsignedRange {
	var out []unsignedRange
	lo := uint64(0)
	for digits := 1; digits <= 20; digits++ {
		hi := uint64(math.MaxUint64)
		if digits < 20 {
			hi = pow10(digits) - 1
		}
		first, last := lo, hi
		if from != "" {
			first = lo + searchUnsigned(lo, hi, func(n uint64) bool { return strconv.FormatUint(n, 10) >= from })
		}
		if to != "" {
			// The first value at or after to, less one: the last before it.
			end := lo + searchUnsigned(lo, hi, func(n uint64) bool { return strconv.FormatUint(n, 10) >= to })
			if end == lo {
				first, last = 1, 0 // none
			} else {
				last = end - 1
			}
		}
		if first <= last && first >= lo && last <= hi {
			out = append(out, unsignedRange{first, last})
		}
		if digits < 20 {
			lo = pow10(digits)
		}
	}
	return out
}

// searchUnsigned is how many values from lo on are not yet ok (ok holds
// from some value on, or never: then hi-lo+1), among lo through hi.
func searchUnsigned(lo, hi uint64, ok func(uint64) bool) uint64 {
	n := hi - lo + 1 // hi - lo < 2^63 for every count of digits
	return uint64(sort.Search(int(n), func(i int) bool { return ok(lo + uint64(i)) }))
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// unsignedBound is the condition a chunk of span reads its key's first
// column by where that column is a BIGINT UNSIGNED ("" where it is not,
// or the span is the whole table): the values whose text is in the
// span's range of that column (at or below its end's first value, where
// the key has more columns).
func unsignedBound(def *source.TableDef, span model.Span, col string) (string, error) {
	keys := def.KeyNames()
	if len(keys) == 0 || keyKindOf(def.Columns[def.Index(keys[0])].Type) != kindUnsigned || span.Start == "" && span.End == "" {
		return "", nil
	}
	first := func(enc string) (string, error) {
		if enc == "" {
			return "", nil
		}
		vals, err := model.DecodeKeyValues(span.Key, enc)
		if err != nil || len(vals) == 0 {
			return "", err
		}
		return vals[0], nil
	}
	from, err := first(span.Start)
	if err != nil {
		return "", err
	}
	to, err := first(span.End)
	if err != nil {
		return "", err
	}
	if to != "" && len(keys) > 1 {
		to += "\x00" // (to, …) may be below the end: to's own rows too
	}
	var or []string
	for _, r := range unsignedRanges(from, to) {
		or = append(or, col+" BETWEEN "+strconv.FormatUint(r.lo, 10)+" AND "+strconv.FormatUint(r.hi, 10))
	}
	if len(or) == 0 {
		return "FALSE", nil
	}
	return "(" + strings.Join(or, " OR ") + ")", nil
}
