package mysql

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The values of a BIGINT UNSIGNED column in a byte range of their text
// are the ranges unsignedRanges gives, and no others: checked for every
// value at each range's edges and beside them, and for values spread over
// every count of digits.
func TestAnUnsignedKeysByteRangeIsRangesOfItsValues(t *testing.T) {
	for _, c := range []struct {
		from, to string
		want     []unsignedRange // the first ranges (all, where none)
	}{
		{"", "5", []unsignedRange{{0, 4}, {10, 49}, {100, 499}, {1000, 4999}}},
		{"5", "", []unsignedRange{{5, 9}, {50, 99}, {500, 999}}},
		{"0", "1", []unsignedRange{{0, 0}}},
		{"12", "130", []unsignedRange{{12, 13}, {120, 129}, {1200, 1299}}},
		{"m", "", nil},
		{"", "0", nil},
		{"18446744073709551615", "", nil},
		{"9223372036854775900", "", nil},
	} {
		got := unsignedRanges(c.from, c.to)
		if c.want == nil && c.from != "18446744073709551615" && c.from != "9223372036854775900" && len(got) != 0 {
			t.Fatalf("[%q, %q): %v, want none", c.from, c.to, got)
		}
		for i, w := range c.want {
			if i >= len(got) || got[i] != w {
				t.Fatalf("[%q, %q): %v, want %v first", c.from, c.to, got, c.want)
			}
		}
		checkUnsignedRanges(t, c.from, c.to)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		a, b := strconv.FormatUint(rng.Uint64()>>rng.IntN(64), 10), strconv.FormatUint(rng.Uint64()>>rng.IntN(64), 10)
		if b < a {
			a, b = b, a
		}
		checkUnsignedRanges(t, a[:1+rng.IntN(len(a))], b)
	}
}

func FuzzUnsignedRanges(f *testing.F) {
	for _, s := range [][2]string{{"", "5"}, {"5", ""}, {"12", "130"}, {"9", "90"}, {"", ""}, {"a", "b"}, {"18446744073709551615", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, from, to string) {
		checkUnsignedRanges(t, from, to)
	})
}

// checkUnsignedRanges checks the ranges of [from, to) at every edge of
// each count of digits and of each range, and at each bound cut or
// padded (with 0s and 9s) to each count of digits, one either side: a
// range missing inside a count of digits shows there.
func checkUnsignedRanges(t *testing.T, from, to string) {
	t.Helper()
	rs := unsignedRanges(from, to)
	in := func(n uint64) bool {
		for _, r := range rs {
			if r.lo <= n && n <= r.hi {
				return true
			}
		}
		return false
	}
	want := func(n uint64) bool {
		s := strconv.FormatUint(n, 10)
		return s >= from && (to == "" || s < to)
	}
	probe := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1}
	for p := uint64(1); p <= 1e19; p *= 10 {
		probe = append(probe, p-1, p, p+1)
		if p == 1e19 {
			break
		}
	}
	for _, s := range []string{from, to} {
		for digits := 1; digits <= 20; digits++ {
			for _, pad := range []string{"0", "9"} {
				v := s
				if len(v) > digits {
					v = v[:digits]
				}
				for len(v) < digits {
					v += pad
				}
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					probe = append(probe, n-1, n, n+1)
				}
			}
		}
	}
	for i, r := range rs {
		probe = append(probe, r.lo-1, r.lo, r.lo+1, r.hi-1, r.hi, r.hi+1)
		if i > 0 && r.lo <= rs[i-1].hi {
			t.Fatalf("[%q, %q): ranges %v overlap or are out of order", from, to, rs)
		}
	}
	for _, n := range probe {
		if in(n) != want(n) {
			t.Fatalf("[%q, %q): %d (text %q) in the ranges %v: %v, want %v", from, to, n, strconv.FormatUint(n, 10), rs, in(n), want(n))
		}
	}
}
