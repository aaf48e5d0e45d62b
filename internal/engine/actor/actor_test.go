package actor

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

func TestSplitCutsTheStateAtTheKey(t *testing.T) {
	a := NewReplication(model.Span{Table: "t1", Start: "g", End: "t"}, 100)
	a.Receive(150)
	a.Receive(120) // positions never go back
	if _, err := a.Split("g"); err == nil {
		t.Fatal("a split at the start was accepted")
	}
	if _, err := a.Split("z"); err == nil {
		t.Fatal("a split past the end was accepted")
	}
	upper, err := a.Split("m")
	if err != nil {
		t.Fatal(err)
	}
	if a.Span() != (model.Span{Table: "t1", Start: "g", End: "m"}) || a.Position() != 150 {
		t.Fatalf("lower half: %v at %v", a.Span(), a.Position())
	}
	b := &Replication{}
	if err := b.Restore(upper); err != nil {
		t.Fatal(err)
	}
	if b.Span() != (model.Span{Table: "t1", Start: "m", End: "t"}) || b.Position() != 150 {
		t.Fatalf("upper half: %v at %v", b.Span(), b.Position())
	}
	snap, _ := a.Snapshot()
	c := &Replication{}
	if err := c.Restore(snap); err != nil || c.Span() != a.Span() || c.Position() != a.Position() {
		t.Fatalf("snapshot round trip: %v %v %v", err, c.Span(), c.Position())
	}
	if err := c.Restore([]byte(`{"version":2}`)); err == nil {
		t.Fatal("a future version was restored")
	}
}
