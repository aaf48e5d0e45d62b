package model

import (
	"fmt"
	"sort"
)

// Span is a key range [Start, End) of one table. An empty End means the
// range is open above; an empty Start means it starts at the first key.
type Span struct {
	Table string `json:"table"`
	Start string `json:"start"`
	End   string `json:"end"`
	// Key names the key's column types when Start and End are encoded
	// keys (a database table; see keys.go); empty for plain text keys.
	Key string `json:"key,omitempty"`
	// KeyColumns names the key's columns (KeyColumns) when the span was
	// cut, which its copy goes by until the copy's first chunk records
	// them (CopyKey): a key moved to other columns of the same types
	// before a partition copied anything is then told too. Empty for
	// spans cut before it was kept.
	KeyColumns string `json:"key_columns,omitempty"`
}

// CopyKey is the key columns the copy of s goes by, as far as c is: the
// ones its first chunk recorded, else the ones s was cut on ("" when
// neither is known).
func (s Span) CopyKey(c CopyProgress) string {
	if c.Key != "" {
		return c.Key
	}
	return s.KeyColumns
}

// SameRange says s and o are the same key range of the same table, keyed
// alike. It leaves KeyColumns out: a partition's saved state compared
// with its route may come from an agent older than that field (a
// rolling upgrade), and the range is what a hand-over or a split needs
// to agree on.
func (s Span) SameRange(o Span) bool {
	return s.Table == o.Table && s.Start == o.Start && s.End == o.End && s.Key == o.Key
}

// Contains reports whether key falls in the span.
func (s Span) Contains(key string) bool {
	return key >= s.Start && (s.End == "" || key < s.End)
}

// ValidSplitKey reports whether key splits the span into two non-empty
// halves (seed 003: Start < key < End, or Start < key when End is open).
func (s Span) ValidSplitKey(key string) error {
	if key <= s.Start {
		return fmt.Errorf("split key %q must be greater than the partition's start %q", DecodeKey(s.Key, key), DecodeKey(s.Key, s.Start))
	}
	if s.End != "" && key >= s.End {
		return fmt.Errorf("split key %q must be less than the partition's end %q", DecodeKey(s.Key, key), DecodeKey(s.Key, s.End))
	}
	return nil
}

// Bounds are the span's start and end in text form (keys decoded).
func (s Span) Bounds() (string, string) { return DecodeKey(s.Key, s.Start), DecodeKey(s.Key, s.End) }

func (s Span) String() string {
	start, end := s.Bounds()
	if end == "" {
		end = "∞"
	}
	return fmt.Sprintf("%s[%q,%q)", s.Table, start, end)
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

// CheckCoverage proves that spans cover each table's whole key space
// exactly once: per table, sorted by start, the first starts at "", each
// ends where the next starts, and the last is open. It names the first
// gap or overlap it finds.
func CheckCoverage(spans []Span) error {
	byTable := map[string][]Span{}
	for _, s := range spans {
		byTable[s.Table] = append(byTable[s.Table], s)
	}
	tables := make([]string, 0, len(byTable))
	for t := range byTable {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		ss := byTable[t]
		sort.Slice(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })
		want := ""
		for i, s := range ss {
			switch {
			case i > 0 && (ss[i-1].End == "" || s.Start < want):
				return fmt.Errorf("table %s: %s overlaps %s", t, s, ss[i-1])
			case s.Start > want:
				return fmt.Errorf("table %s: keys [%q, %q) are in no partition", t, want, s.Start)
			case s.End != "" && s.End <= s.Start:
				return fmt.Errorf("table %s: %s is empty", t, s)
			}
			want = s.End
		}
		if want != "" {
			return fmt.Errorf("table %s: keys from %q on are in no partition", t, want)
		}
	}
	return nil
}
