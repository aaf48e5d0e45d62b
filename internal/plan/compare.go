package plan

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// Comparison says how two plans differ (cdcctl plan diff A B): what
// they read (the objects of their fingerprints whose revisions differ),
// and the steps one has that the other has not. Steps are compared as
// the operator reads them (StepText), so the same move planned from two
// snapshots is the same step.
type Comparison struct {
	Same bool `json:"same"`
	// Kind and Target, when they differ: "drain capture-2 → drain capture-3".
	What string `json:"what,omitempty"`
	// Read: objects that one plan read at another revision, or that only
	// one read (Was or Now 0).
	Read  []Change `json:"read,omitempty"`
	OnlyA []Step   `json:"only_a,omitempty"`
	OnlyB []Step   `json:"only_b,omitempty"`
	// Batches and predicted durations, A then B.
	Batches   [2]int   `json:"batches"`
	Predicted [2]int64 `json:"predicted_ms"`
}

// Compare compares plan a with plan b.
func Compare(a, b *Plan) Comparison {
	c := Comparison{Batches: [2]int{len(a.Batches), len(b.Batches)}, Predicted: [2]int64{a.PredictedMillis, b.PredictedMillis}}
	if a.Kind != b.Kind || a.Target != b.Target || a.BatchSize != b.BatchSize {
		c.What = fmt.Sprintf("%s %s (batch %d) → %s %s (batch %d)", a.Kind, a.Target, a.BatchSize, b.Kind, b.Target, b.BatchSize)
	}
	for obj, was := range a.Fingerprint.Objects {
		if now := b.Fingerprint.Objects[obj]; now != was {
			c.Read = append(c.Read, Change{Object: obj, Was: was, Now: now})
		}
	}
	for obj, now := range b.Fingerprint.Objects {
		if _, ok := a.Fingerprint.Objects[obj]; !ok {
			c.Read = append(c.Read, Change{Object: obj, Now: now})
		}
	}
	for cf, was := range a.Fingerprint.Partitions {
		if now, ok := b.Fingerprint.Partitions[cf]; !ok || now.Digest != was.Digest {
			c.Read = append(c.Read, Change{Object: partitionsObject(cf), Was: was.Revision, Now: now.Revision})
		}
	}
	for cf, now := range b.Fingerprint.Partitions {
		if _, ok := a.Fingerprint.Partitions[cf]; !ok {
			c.Read = append(c.Read, Change{Object: partitionsObject(cf), Now: now.Revision})
		}
	}
	sort.Slice(c.Read, func(i, j int) bool { return c.Read[i].Object < c.Read[j].Object })
	c.OnlyA, c.OnlyB = onlyIn(a, b), onlyIn(b, a)
	c.Same = c.What == "" && len(c.OnlyA) == 0 && len(c.OnlyB) == 0
	return c
}

// onlyIn lists the steps of x that y lacks, as many times as x has them
// more often.
func onlyIn(x, y *Plan) []Step {
	have := map[string]int{}
	for _, b := range y.Batches {
		for _, s := range b.Steps {
			have[StepText(s)]++
		}
	}
	var out []Step
	for _, b := range x.Batches {
		for _, s := range b.Steps {
			if t := StepText(s); have[t] > 0 {
				have[t]--
			} else {
				out = append(out, s)
			}
		}
	}
	return out
}

// RenderComparison writes a comparison for people: a and b name the two
// plans (their files).
func RenderComparison(w io.Writer, a, b string, c Comparison) {
	if c.Same {
		fmt.Fprintf(w, "The plans make the same steps (%s and %s)", a, b)
	} else {
		fmt.Fprintf(w, "The plans differ (%s and %s)", a, b)
	}
	if len(c.Read) > 0 {
		fmt.Fprintf(w, "; they read %d objects at different revisions", len(c.Read))
	}
	fmt.Fprintln(w, ".")
	if c.What != "" {
		fmt.Fprintf(w, "  plan: %s\n", c.What)
	}
	ms := func(v int64) time.Duration { return (time.Duration(v) * time.Millisecond).Round(time.Millisecond) }
	if c.Batches[0] != c.Batches[1] || c.Predicted[0] != c.Predicted[1] {
		fmt.Fprintf(w, "  batches: %d → %d; predicted %s → %s\n", c.Batches[0], c.Batches[1], ms(c.Predicted[0]), ms(c.Predicted[1]))
	}
	for _, s := range c.OnlyA {
		fmt.Fprintf(w, "  - %s\n", StepText(s))
	}
	for _, s := range c.OnlyB {
		fmt.Fprintf(w, "  + %s\n", StepText(s))
	}
	const most = 10
	for i, ch := range c.Read {
		if i == most {
			fmt.Fprintf(w, "  … and %d more objects read at other revisions\n", len(c.Read)-most)
			break
		}
		fmt.Fprintf(w, "  read: %s\n", readText(ch))
	}
}

func readText(c Change) string {
	switch {
	case c.Was == 0:
		return c.Object + " (only the second plan read it)"
	case c.Now == 0:
		return c.Object + " (only the first plan read it)"
	}
	return fmt.Sprintf("%s (revision %d → %d)", c.Object, c.Was, c.Now)
}
