package model

import "fmt"

// Span is a key range [Start, End) of one table. An empty End means the
// range is open above; an empty Start means it starts at the first key.
type Span struct {
	Table string `json:"table"`
	Start string `json:"start"`
	End   string `json:"end"`
}

// Contains reports whether key falls in the span.
func (s Span) Contains(key string) bool {
	return key >= s.Start && (s.End == "" || key < s.End)
}

// ValidSplitKey reports whether key splits the span into two non-empty
// halves (seed 003: Start < key < End, or Start < key when End is open).
func (s Span) ValidSplitKey(key string) error {
	if key <= s.Start {
		return fmt.Errorf("split key %q must be greater than the partition's start %q", key, s.Start)
	}
	if s.End != "" && key >= s.End {
		return fmt.Errorf("split key %q must be less than the partition's end %q", key, s.End)
	}
	return nil
}

func (s Span) String() string {
	end := s.End
	if end == "" {
		end = "∞"
	}
	return fmt.Sprintf("%s[%q,%q)", s.Table, s.Start, end)
}

// SplitEvenly cuts a table's whole key space into n spans at the given
// boundaries function: bound(i) for i in 1..n-1 is the start of span i.
func SplitEvenly(table string, n int, bound func(i int) string) []Span {
	if n < 1 {
		n = 1
	}
	out := make([]Span, 0, n)
	start := ""
	for i := 1; i < n; i++ {
		b := bound(i)
		out = append(out, Span{Table: table, Start: start, End: b})
		start = b
	}
	return append(out, Span{Table: table, Start: start})
}
