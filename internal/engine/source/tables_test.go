package source

import (
	"slices"
	"testing"
)

// What a change of a changefeed's tables adds and removes, each in its
// list's order, whatever order the other list has.
func TestTablesDiffNamesWhatIsAddedAndRemovedInOrder(t *testing.T) {
	added, removed := TablesDiff([]string{"a", "b", "c", "d"}, []string{"d", "e", "b", "f"})
	if !slices.Equal(added, []string{"e", "f"}) || !slices.Equal(removed, []string{"a", "c"}) {
		t.Fatalf("added %q, removed %q; want [e f], [a c]", added, removed)
	}
	if added, removed := TablesDiff([]string{"a", "b"}, []string{"b", "a"}); added != nil || removed != nil {
		t.Fatalf("the same tables in another order: added %q, removed %q", added, removed)
	}
	if added, removed := TablesDiff(nil, []string{"a"}); !slices.Equal(added, []string{"a"}) || removed != nil {
		t.Fatalf("from nothing: added %q, removed %q", added, removed)
	}
}
