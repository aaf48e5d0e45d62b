package postgres

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// attrs is a catalog of live columns by number; dropped lists numbers
// dropped.
func attrs(live map[int16]string, dropped ...int16) map[int16]attribute {
	out := map[int16]attribute{}
	for n, name := range live {
		out[n] = attribute{name: name, live: true}
	}
	for _, n := range dropped {
		out[n] = attribute{name: fmt.Sprintf("........pg.dropped.%d........", n)}
	}
	return out
}

// later marks columns' catalog rows as written by a later transaction
// than the one read (0).
func later(a map[int16]attribute, nums ...int16) map[int16]attribute {
	for _, n := range nums {
		c := a[n]
		c.xmin = 99
		a[n] = c
	}
	return a
}

// Columns are paired by their attribute numbers when the catalog agrees
// with the stream, and by their order when it has moved on; a change the
// order cannot tell apart is not guessed.
func TestColumnsArePairedByNumberThenByOrder(t *testing.T) {
	for _, c := range []struct {
		name     string
		from     []string
		fromNums []int16
		to       []string
		attrs    map[int16]attribute
		pair     []int // nil: not told apart
		nums     []int16
	}{
		{name: "the last column renamed, the catalog as the stream",
			from: []string{"id", "v"}, fromNums: []int16{1, 2}, to: []string{"id", "w"},
			attrs: attrs(map[int16]string{1: "id", 2: "w"}), pair: []int{0, 1}, nums: []int16{1, 2}},
		{name: "the last column dropped and one added",
			from: []string{"id", "v"}, fromNums: []int16{1, 2}, to: []string{"id", "w"},
			attrs: attrs(map[int16]string{1: "id", 3: "w"}, 2), pair: []int{0, -1}, nums: []int16{1, 3}},
		{name: "two swapped",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "b", "a"},
			attrs: attrs(map[int16]string{1: "id", 2: "b", 3: "a"}), pair: []int{0, 1, 2}, nums: []int16{1, 2, 3}},
		{name: "a column dropped and another renamed to its name",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "a"},
			attrs: attrs(map[int16]string{1: "id", 3: "a"}, 2), pair: []int{0, 2}, nums: []int16{1, 3}},
		{name: "renamed, then (later in the WAL) renamed again and its name added back",
			from: []string{"id", "v"}, fromNums: []int16{1, 2}, to: []string{"id", "w"},
			attrs: attrs(map[int16]string{1: "id", 2: "x", 3: "w"}), pair: []int{0, 1}, nums: []int16{1, 2}},
		{name: "renamed in the middle, the catalog moved on",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "c", "b"},
			attrs: attrs(map[int16]string{1: "id", 2: "z", 3: "b"}), pair: []int{0, 1, 2}, nums: []int16{1, 2, 3}},
		{name: "two in the middle, one dropped, one renamed, the catalog moved on",
			from: []string{"id", "a", "b", "c"}, fromNums: []int16{1, 2, 3, 4}, to: []string{"id", "x", "c"},
			attrs: attrs(map[int16]string{1: "id", 3: "y", 4: "c"}, 2), pair: []int{0, 2, 3}, nums: []int16{1, 3, 4}},
		{name: "two in the middle, one dropped then, the other renamed and dropped later",
			from: []string{"id", "a", "b", "c"}, fromNums: []int16{1, 2, 3, 4}, to: []string{"id", "x", "c"},
			attrs: attrs(map[int16]string{1: "id", 4: "c"}, 2, 3), pair: nil},
		{name: "numbers not kept (an older checkpoint), renamed in the middle",
			from: []string{"id", "a", "b"}, to: []string{"id", "c", "b"},
			attrs: attrs(map[int16]string{1: "id", 2: "c", 3: "b"}), pair: []int{0, 1, 2}, nums: []int16{1, 2, 3}},
		{name: "numbers not kept, the last one changed: dropped and added, as before",
			from: []string{"id", "v"}, to: []string{"id", "w"},
			attrs: attrs(map[int16]string{1: "id", 2: "w"}), pair: []int{0, -1}, nums: []int16{1, 2}},
		{name: "a name dropped and added again, then or since",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "b"},
			attrs: attrs(map[int16]string{1: "id", 4: "b"}, 2, 3), pair: nil},
		{name: "a name dropped since, not added again",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "b"},
			attrs: attrs(map[int16]string{1: "id"}, 2, 3), pair: []int{0, 2}, nums: []int16{1, 3}},
		{name: "a column renamed and its name given to one added, in one go",
			from: []string{"id", "b", "c3", "d"}, fromNums: []int16{1, 3, 4, 5}, to: []string{"id", "b", "c4", "d", "c3"},
			attrs: attrs(map[int16]string{1: "id", 3: "b", 4: "c4", 5: "d", 6: "c3"}), pair: []int{0, 1, 2, 3, -1}, nums: []int16{1, 3, 4, 5, 6}},
		{name: "a column dropped in this transaction, then (later in the WAL) another dropped, one renamed to its name and its own name added again",
			from: []string{"id", "a", "b", "c"}, fromNums: []int16{1, 2, 3, 4}, to: []string{"id", "a", "b"},
			attrs: later(attrs(map[int16]string{1: "id", 3: "a", 5: "b"}, 2, 4), 3), pair: []int{0, 1, 2}, nums: []int16{1, 2, 3}},
		{name: "kept names out of their order",
			from: []string{"id", "a", "b"}, fromNums: []int16{1, 2, 3}, to: []string{"id", "b", "a"},
			attrs: attrs(map[int16]string{1: "id"}, 2, 3), pair: nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			pair, nums, ok := matchColumns(c.from, c.fromNums, c.to, c.attrs, 0)
			if c.pair == nil {
				if ok {
					t.Fatalf("paired %v (numbers %v), want the change not told apart", pair, nums)
				}
				return
			}
			if !ok || !slices.Equal(pair, c.pair) || !slices.Equal(nums, c.nums) {
				t.Fatalf("paired %v (numbers %v, ok %v), want %v (numbers %v)", pair, nums, ok, c.pair, c.nums)
			}
		})
	}
}

// Renames are written in an order each can run in.
func TestRenamesAreOrderedSoThatEachNameIsFree(t *testing.T) {
	none := func(string) bool { return false }
	for _, c := range []struct {
		in, want [][2]string
	}{
		{[][2]string{{"b", "c"}, {"c", "d"}}, [][2]string{{"c", "d"}, {"b", "c"}}},
		{[][2]string{{"a", "b"}, {"b", "a"}}, [][2]string{{"a", "a_cdcctl_renaming"}, {"b", "a"}, {"a_cdcctl_renaming", "b"}}},
		{[][2]string{{"a", "x"}}, [][2]string{{"a", "x"}}},
		{[][2]string{{strings.Repeat("é", 30), "b"}, {"b", strings.Repeat("é", 30)}}, [][2]string{
			{strings.Repeat("é", 30), strings.Repeat("é", 23) + "_cdcctl_renaming"}, {"b", strings.Repeat("é", 30)}, {strings.Repeat("é", 23) + "_cdcctl_renaming", "b"}}},
	} {
		if got := renames(c.in, none); !slices.Equal(got, c.want) {
			t.Errorf("renames(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
