package storage

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// A round takes the forced flushes first and then the oldest rows,
// whatever order the tables were queued in; it stops at the first table
// not yet due, and skips what is flushing or was flushed already.
func TestAFlushRoundTakesTheOldestFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q dueQueue
	at := func(sec int) *dispatcherState {
		d := &dispatcherState{id: time.Duration(sec).String(), since: t0.Add(time.Duration(sec) * time.Second), pending: []*sink.Batch{{}}}
		q.add(d)
		return d
	}
	for _, sec := range []int{5, 1, 3, 0, 7} {
		at(sec)
	}
	forced := at(9)
	forced.flushWanted = true
	q.urge(forced)
	flushing := at(-1)
	flushing.flushing = true
	flushed := at(-2)
	flushed.pending = nil
	now := t0.Add(6 * time.Second) // 7 is not due yet
	due := func(d *dispatcherState) string {
		switch {
		case d.flushWanted:
			return ReasonForced
		case now.Sub(d.since) >= time.Second:
			return ReasonDelay
		}
		return ""
	}
	var got []int
	for {
		d, _ := q.next(due)
		if d == nil {
			break
		}
		got = append(got, int(d.since.Sub(t0)/time.Second))
		d.flushing = true
	}
	want := []int{9, 0, 1, 3, 5}
	if len(got) != len(want) {
		t.Fatalf("picked %v (seconds); want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picked %v (seconds); want %v", got, want)
		}
	}
	if q.empty() {
		t.Fatal("the table not yet due left the queue")
	}
}
