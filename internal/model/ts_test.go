package model

import (
	"testing"
	"time"
)

func TestTsLayout(t *testing.T) {
	at := time.Date(2026, 11, 21, 8, 0, 0, 123e6, time.UTC)
	ts := TsFromTime(at)
	if ts.Millis() != at.UnixMilli() || ts.Logical() != 0 || !ts.Time().Equal(at) {
		t.Fatalf("ts %v: millis %d logical %d", ts, ts.Millis(), ts.Logical())
	}
	l := ts.WithLogical(5)
	if l.Millis() != ts.Millis() || l.Logical() != 5 || !(l > ts) || !(l < TsFromMillis(ts.Millis()+1)) {
		t.Fatalf("logical %v", l)
	}
}

func TestSpan(t *testing.T) {
	s := Span{Table: "t0001", Start: "c", End: "m"}
	for key, in := range map[string]bool{"b": false, "c": true, "l": true, "lzzz": true, "m": false, "z": false} {
		if s.Contains(key) != in {
			t.Errorf("Contains(%q) = %v", key, !in)
		}
	}
	open := Span{Table: "t0001", Start: "m"}
	if !open.Contains("zzzz") || open.Contains("a") {
		t.Error("open span")
	}
	for key, ok := range map[string]bool{"c": false, "b": false, "d": true, "m": false, "n": false} {
		if (s.ValidSplitKey(key) == nil) != ok {
			t.Errorf("ValidSplitKey(%q) ok=%v", key, !ok)
		}
	}
	if open.ValidSplitKey("zz") != nil || open.ValidSplitKey("m") == nil {
		t.Error("open span split keys")
	}
	spans := SplitEvenly("t", 3, func(i int) string { return string(rune('a' + 8*i)) })
	if len(spans) != 3 || spans[0].Start != "" || spans[0].End != "i" || spans[1].End != "q" || spans[2].End != "" {
		t.Fatalf("%v", spans)
	}
}
