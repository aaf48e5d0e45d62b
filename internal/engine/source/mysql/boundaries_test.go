package mysql

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A range of integer keys is cut into ranges of the same width, from its
// smallest key, over the whole of int64 too; too sparse a range (or none)
// is not cut by value at all.
func TestIntegerKeysAreCutEvenlyByValue(t *testing.T) {
	for _, tc := range []struct {
		lo, hi string
		rows   int64
		n      int
		want   string // the cuts, or "sparse"
	}{
		{"0", "199999", 200_000, 4, "50000,100000,150000"},
		{"1", "1000", 1000, 4, "251,501,751"},
		{"-500", "499", 1000, 2, "0"},
		{"7", "8", 200_000, 4, "8"}, // two keys: one cut
		{"5", "5", 200_000, 4, ""},  // one key: none
		{strconv.Itoa(math.MinInt64), strconv.Itoa(math.MaxInt64), math.MaxInt64, 4, "-4611686018427387904,0,4611686018427387904"},
		{"1", "10000001", 100_000, 4, "sparse"}, // 100 values a row, and one over
		{"1", "10000000", 100_000, 4, "2500001,5000001,7500001"},
		{"1", "10000001", 0, 4, "2500001,5000001,7500001"}, // rows not known: not judged sparse
		{"10", "1", 100_001, 4, "sparse"},
		{"", "", 100_001, 4, "sparse"}, // an empty table: no ends
	} {
		cuts, ok := evenCuts(tc.lo, tc.hi, tc.rows, tc.n)
		var got []string
		for _, c := range cuts {
			got = append(got, model.DecodeKey("int8", c))
		}
		s := strings.Join(got, ",")
		if !ok {
			s = "sparse"
		}
		if s != tc.want {
			t.Errorf("%s to %s, %d rows, %d ranges: cuts %q, want %q", tc.lo, tc.hi, tc.rows, tc.n, s, tc.want)
		}
	}
}
