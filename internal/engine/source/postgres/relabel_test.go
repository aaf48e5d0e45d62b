package postgres

import (
	"slices"
	"testing"
)

// Which enums a look finds renamed: a value's label changed, by the
// value's oid; a value added changes no row, and an enum with two values
// renamed is named once.
func TestTheEnumsWhoseValuesWereRenamed(t *testing.T) {
	before := map[uint32]enumLabel{1: {typ: 10, label: "ok"}, 2: {typ: 10, label: "sad"}, 3: {typ: 20, label: "low"}, 4: {typ: 20, label: "high"}, 5: {typ: 30, label: "x"}}
	now := map[uint32]enumLabel{1: {typ: 10, label: "ok"}, 2: {typ: 10, label: "blue"}, 3: {typ: 20, label: "lo"}, 4: {typ: 20, label: "hi"},
		5: {typ: 30, label: "x"}, 6: {typ: 30, label: "y"}}
	if got := relabeled(before, now); !slices.Equal(got, []uint32{10, 20}) {
		t.Fatalf("renamed: %v, want [10 20]", got)
	}
	if got := relabeled(now, now); len(got) != 0 {
		t.Fatalf("nothing renamed: %v", got)
	}
}
