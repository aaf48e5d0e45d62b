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

func TestNextExceptSkipsWhatItIsTold(t *testing.T) {
	d := NewDestinations([]model.NodeID{"capture-1", "capture-2", "capture-3"})
	d.Count("capture-2")
	skip3 := func(n model.NodeID) bool { return n == "capture-3" }
	// Loads 0,1,0: capture-1 (capture-3 is as light, but skipped), then
	// capture-1 and capture-2 tie at 1: the first in order.
	for i, want := range []model.NodeID{"capture-1", "capture-1", "capture-2"} {
		if got, ok := d.NextExcept(skip3); !ok || got != want {
			t.Fatalf("pick %d: %s, %v; want %s", i, got, ok, want)
		}
	}
	if n, _ := d.Next(); n != "capture-3" {
		t.Fatalf("Next after NextExcept: %s; the skipped capture-3 is the least loaded", n)
	}
	if _, ok := d.NextExcept(func(model.NodeID) bool { return true }); ok {
		t.Fatal("a destination although every candidate is skipped")
	}
}

func TestDestinationsSayTheirLoads(t *testing.T) {
	d := NewDestinations([]model.NodeID{"capture-1", "capture-2"})
	d.Count("capture-2")
	d.Count("capture-2")
	if got := d.String(); got != "capture-1=0 capture-2=2" {
		t.Fatalf("String() = %q", got)
	}
}
