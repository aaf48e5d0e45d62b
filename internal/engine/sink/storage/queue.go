package storage

import (
	"container/heap"
	"time"
)

// dueQueue holds the dispatchers with rows waiting for a flush, so that a
// flush round looks only at what may be due, not at every dispatcher the
// sink has seen. A round runs after every flush; scanning them all made
// the rounds a fifth of a capture's CPU at 10,000 tables (pprof).
//
// Entries are checked when they come out (lazily): a dispatcher that
// started flushing, was fenced, or whose rows went in an earlier flush
// leaves a stale entry behind, and is queued again by the write that
// gives it rows or by the end of its flush.
type dueQueue struct {
	// urgent are the dispatchers with a full file or a Flush waiting:
	// they go before the others.
	urgent []*dispatcherState
	// byAge is the rest, oldest row first.
	byAge ageHeap
}

// queued is a dispatcher waiting since its oldest row arrived; the entry
// is stale once the dispatcher's since differs.
type queued struct {
	d     *dispatcherState
	since time.Time
}

type ageHeap []queued

func (h ageHeap) Len() int           { return len(h) }
func (h ageHeap) Less(i, j int) bool { return h[i].since.Before(h[j].since) }
func (h ageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ageHeap) Push(x any)        { *h = append(*h, x.(queued)) }
func (h *ageHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = queued{}
	*h = old[:len(old)-1]
	return q
}

// add queues d by the age of its oldest row.
func (q *dueQueue) add(d *dispatcherState) { heap.Push(&q.byAge, queued{d: d, since: d.since}) }

// urge queues d before the others.
func (q *dueQueue) urge(d *dispatcherState) { q.urgent = append(q.urgent, d) }

// waits says whether d has rows that no flush has taken yet.
// One being appended to (spool=bucket) waits for its write to end.
func (d *dispatcherState) waits() bool {
	return !d.flushing && d.appending == 0 && len(d.pending) > 0
}

// next returns the next dispatcher due now and why, urgent ones first,
// then by age; nil when none is. due says why a waiting dispatcher is
// due ("" if not yet).
func (q *dueQueue) next(due func(*dispatcherState) string) (*dispatcherState, string) {
	for len(q.urgent) > 0 {
		d := q.urgent[0]
		q.urgent[0] = nil
		q.urgent = q.urgent[1:]
		if !d.waits() {
			if d.appending > 0 {
				d.requeue = true // urged again when its write ends
			} else if !d.flushing {
				d.flushWanted = false // nothing left to flush
			}
			continue
		}
		if r := due(d); r == ReasonForced || r == ReasonDDL || r == ReasonSize {
			return d, r
		}
	}
	for q.byAge.Len() > 0 {
		e := q.byAge[0]
		if !e.d.waits() || !e.since.Equal(e.d.since) {
			if e.d.appending > 0 {
				e.d.requeue = true // queued again when its write ends
			}
			heap.Pop(&q.byAge)
			continue
		}
		// The oldest is not due: none is (age is what makes rows due,
		// and full files and Flush are urgent).
		r := due(e.d)
		if r == "" {
			return nil, ""
		}
		heap.Pop(&q.byAge)
		return e.d, r
	}
	return nil, ""
}

// empty says whether nothing is queued (stale entries count).
func (q *dueQueue) empty() bool { return len(q.urgent) == 0 && q.byAge.Len() == 0 }
