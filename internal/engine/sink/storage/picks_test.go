package storage

import (
	"testing"
	"time"
)

// A round with fewer free slots than due tables takes the forced ones and
// then the oldest, whatever the order it meets them in.
func TestAFlushRoundTakesTheOldestFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(sec int, reason string) dueFlush {
		return dueFlush{d: &dispatcherState{id: reason + time.Duration(sec).String(), since: t0.Add(time.Duration(sec) * time.Second)}, reason: reason}
	}
	offers := []dueFlush{at(5, ReasonDelay), at(1, ReasonDelay), at(9, ReasonForced), at(3, ReasonInterval), at(0, ReasonDelay), at(7, ReasonDelay)}
	p := flushPicks{n: 3}
	kept := 0
	for _, f := range offers {
		if p.offer(f) {
			kept++
		}
	}
	var got []time.Duration
	for _, f := range p.best {
		got = append(got, f.d.since.Sub(t0)/time.Second)
	}
	if len(got) != 3 || got[0] != 9 || got[1] != 0 || got[2] != 1 {
		t.Fatalf("picked %v (seconds), want the forced one (9), then 0 and 1", got)
	}
	if kept == len(offers) {
		t.Fatal("no offer was reported left for a later round")
	}
}
