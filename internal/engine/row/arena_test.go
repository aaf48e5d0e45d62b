package row

import (
	"fmt"
	"strings"
	"testing"
)

// The arena's strings and value slices never change once handed out,
// whatever is cut after them: blocks are only appended to, and a slice
// appended to by its reader copies instead of reaching its neighbour.
func TestTheArenaNeverReusesWhatItHandedOut(t *testing.T) {
	var a Arena
	var strs, want []string
	var slices [][]Value
	for i := 0; i < 5000; i++ {
		s := fmt.Sprintf("%d:%s", i, strings.Repeat("x", i%300))
		if i%97 == 0 {
			s = strings.Repeat("y", arenaBytes/4) // beyond a block's share: its own
		}
		b := []byte(s)
		strs = append(strs, a.String(b))
		want = append(want, s)
		copy(b, strings.Repeat("z", len(b))) // the caller's bytes change (pebble's do)
		vs := a.Values(i%7 + 1)
		vs[0] = Text(s)
		slices = append(slices, vs)
		if i%5 == 0 {
			_ = append(vs, Null) // a reader appending to its slice
		}
	}
	for i := range strs {
		if strs[i] != want[i] {
			t.Fatalf("string %d changed: %.20q, want %.20q", i, strs[i], want[i])
		}
		if slices[i][0].Text != want[i] || len(slices[i]) != i%7+1 || cap(slices[i]) != len(slices[i]) {
			t.Fatalf("values %d changed or overlap: %d of cap %d, first %.20q", i, len(slices[i]), cap(slices[i]), slices[i][0].Text)
		}
	}
}
