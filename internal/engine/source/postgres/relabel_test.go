package postgres

import (
	"slices"
	"testing"
)

// Which enums a look finds renamed: a value's label changed, by the
// value's oid; a value added changes no row, and an enum with two values
// renamed is named once.
func TestTheEnumsWhoseValuesWereRenamed(t *testing.T) {
	before := map[uint32]enumLabel{1: {Type: 10, Label: "ok"}, 2: {Type: 10, Label: "sad"}, 3: {Type: 20, Label: "low"}, 4: {Type: 20, Label: "high"}, 5: {Type: 30, Label: "x"}}
	now := map[uint32]enumLabel{1: {Type: 10, Label: "ok"}, 2: {Type: 10, Label: "blue"}, 3: {Type: 20, Label: "lo"}, 4: {Type: 20, Label: "hi"},
		5: {Type: 30, Label: "x"}, 6: {Type: 30, Label: "y"}}
	if got := relabeled(before, now); !slices.Equal(got, []uint32{10, 20}) {
		t.Fatalf("renamed: %v, want [10 20]", got)
	}
	if got := relabeled(now, now); len(got) != 0 {
		t.Fatalf("nothing renamed: %v", got)
	}
}
