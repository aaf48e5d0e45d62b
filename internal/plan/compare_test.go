package plan

import (
	"bytes"
	"strings"
	"testing"
)

func TestComparePlansSaysWhichStepsAndReadsDiffer(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-2"}, 6)
	one, err := Drain(s, "capture-3", 2, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if c := Compare(one, one); !c.Same || len(c.Read) != 0 || c.What != "" {
		t.Fatalf("a plan against itself: %+v", c)
	}
	batchOne, _ := Drain(s, "capture-3", 1, DefaultCosts)
	if c := Compare(one, batchOne); c.Same || c.What != "drain capture-3 (batch 2) → drain capture-3 (batch 1)" || len(c.OnlyA)+len(c.OnlyB) != 0 {
		t.Fatalf("batch 2 against batch 1: %+v", c)
	}

	// A capture joins: the later plan spreads the partitions onto it too.
	later := snapshot(4, map[string]string{"a": "capture-3", "b": "capture-2"}, 6)
	for i := range later.Partitions {
		later.Partitions[i].Route.Node = s.Partitions[i].Route.Node
	}
	two, err := Drain(later, "capture-3", 2, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	c := Compare(one, two)
	if c.Same || len(c.OnlyA) == 0 || len(c.OnlyB) == 0 {
		t.Fatalf("a plan before and after a capture joined: %+v", c)
	}
	var b bytes.Buffer
	RenderComparison(&b, "one.json", "two.json", c)
	out := b.String()
	for _, want := range []string{"The plans differ (one.json and two.json); they read ", "  - ", "  + ", "capture-4 ×", "read: node/capture-4 (only the second plan read it)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
}
