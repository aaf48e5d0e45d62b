package model

import (
	"strings"
	"testing"
)

func TestCheckCoverage(t *testing.T) {
	sp := func(table, start, end string) Span { return Span{Table: table, Start: start, End: end} }
	for _, tt := range []struct {
		name  string
		spans []Span
		err   string
	}{
		{"whole", []Span{sp("t1", "", "")}, ""},
		{"split, any order", []Span{sp("t1", "m", ""), sp("t1", "", "g"), sp("t1", "g", "m"), sp("t2", "", "")}, ""},
		{"gap", []Span{sp("t1", "", "g"), sp("t1", "m", "")}, `keys ["g", "m") are in no partition`},
		{"missing start", []Span{sp("t1", "a", "")}, `keys ["", "a") are in no partition`},
		{"missing end", []Span{sp("t1", "", "m")}, `keys from "m" on are in no partition`},
		{"overlap", []Span{sp("t1", "", "m"), sp("t1", "g", "")}, "overlaps"},
		{"two open", []Span{sp("t1", "", ""), sp("t1", "m", "")}, "overlaps"},
		{"empty", []Span{sp("t1", "", "m"), sp("t1", "m", "m"), sp("t1", "m", "")}, "is empty"},
	} {
		err := CheckCoverage(tt.spans)
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
		}
	}
}
