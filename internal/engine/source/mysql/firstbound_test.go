package mysql

import (
	"cmp"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Every row of a span has its key's first value in the range the chunk
// query bounds that column by (firstbound.go): keys of characters alone,
// characters then an integer, an integer then characters; spans between
// random keys, whole or of the first column only (an operator's split
// key), or open at either end. The condition only spares reading: a row
// it left out would be lost.
func TestAFirstColumnBoundKeepsEveryRowOfItsSpan(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(7))
	chars := []string{"a", "B", "~", "Ä", " ", "ab", "z", "é", "0", "-"}
	text := func() string {
		s := ""
		for range 1 + rng.Intn(4) {
			s += chars[rng.Intn(len(chars))]
		}
		return s
	}
	num := func() string { return strconv.Itoa(rng.Intn(21) - 10) }
	for _, tc := range []struct {
		name string
		cols []source.ColumnDef
		gen  []func() string
	}{
		{"characters", []source.ColumnDef{{Name: "k", Type: "varchar(20)", KeyPos: 1}}, []func() string{text}},
		{"characters, integer", []source.ColumnDef{{Name: "sku", Type: "varchar(20)", KeyPos: 1}, {Name: "line", Type: "int(11)", KeyPos: 2}}, []func() string{text, num}},
		{"integer, characters", []source.ColumnDef{{Name: "tenant", Type: "int(11)", KeyPos: 1}, {Name: "sku", Type: "varchar(20)", KeyPos: 2}}, []func() string{num, text}},
	} {
		def := &source.TableDef{Columns: tc.cols}
		types := keyTypes(def)
		key := func(partial bool) (string, []string) {
			vals := make([]string, len(tc.gen))
			for i, g := range tc.gen {
				vals[i] = g()
			}
			if partial {
				vals = vals[:1]
			}
			of := types
			if partial {
				of, _, _ = strings.Cut(types, ",")
			}
			k, err := model.EncodeKeyValues(of, vals)
			if err != nil {
				t.Fatal(err)
			}
			return k, vals
		}
		bounded := 0
		for range 3000 {
			span := model.Span{Table: "t.t", Key: types}
			if rng.Intn(4) > 0 {
				span.Start, _ = key(len(tc.gen) > 1 && rng.Intn(2) == 0)
			}
			if rng.Intn(4) > 0 {
				span.End, _ = key(len(tc.gen) > 1 && rng.Intn(2) == 0)
			}
			if span.End != "" && span.End <= span.Start {
				continue
			}
			r := firstValues(def, span)
			if r.hasLo || r.hasHi {
				bounded++
			}
			for range 20 {
				k, vals := key(false)
				if !span.Contains(k) {
					continue
				}
				if !inFirstRange(t, r, vals[0]) {
					t.Fatalf("%s: key %q of span [%q, %q) has its first value %q outside %+v", tc.name, k, span.Start, span.End, vals[0], r)
				}
			}
		}
		if bounded == 0 {
			t.Fatalf("%s: no span was bounded", tc.name)
		}
	}
}

// inFirstRange says v is in r, compared as the server compares the
// condition firstColumnBound writes of it.
func inFirstRange(t *testing.T, r firstRange, v string) bool {
	compare := func(a, b string) int {
		if r.kind != kindInt {
			return strings.Compare(a, b) // bytes
		}
		x, err1 := strconv.ParseInt(a, 10, 64)
		y, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("not integers: %q %q", a, b)
		}
		return cmp.Compare(x, y)
	}
	if r.hasLo && compare(v, r.lo) < 0 {
		return false
	}
	if r.hasHi && (compare(v, r.hi) > 0 || compare(v, r.hi) == 0 && !r.hiToo) {
		return false
	}
	return true
}
