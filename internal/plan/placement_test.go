package plan

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

func TestDestinationsSpreadAndCountInFlight(t *testing.T) {
	d := NewDestinations([]model.NodeID{"capture-1", "capture-2", "capture-3"})
	for _, existing := range []model.NodeID{"capture-1", "capture-1", "capture-2", "capture-9"} {
		d.Count(existing) // capture-9 is not a candidate (gone or Draining)
	}
	var got []model.NodeID
	for i := 0; i < 5; i++ {
		n, ok := d.Next()
		if !ok {
			t.Fatal("no destination")
		}
		got = append(got, n)
	}
	// Loads start 2,1,0: capture-3, then ties go to the first in order.
	want := []model.NodeID{"capture-3", "capture-2", "capture-3", "capture-1", "capture-2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("destinations %v, want %v", got, want)
		}
	}
	if d.IsCandidate("capture-9") {
		t.Fatal("a non-candidate became one")
	}
	if _, ok := NewDestinations(nil).Next(); ok {
		t.Fatal("a destination out of no candidates")
	}
}
