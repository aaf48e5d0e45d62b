package source

import (
	"fmt"
	"strconv"
	"time"

	"golang.org/x/time/rate"
)

// Pace bounds the rows a changefeed's initial snapshot reads a second on
// one node (snapshot-rate=), across all its partitions there, so that a
// large copy leaves the upstream's disks and CPU to its applications.
// A nil Pace does not bound. A chunk reserves the rows it asks for
// before it is read (at most a second's worth: a chunk asks for no more
// than that), and waits until the rate allows them; the changes that
// stream meanwhile are not held back.
type Pace struct {
	l *rate.Limiter
}

// NewPace paces reads at rows a second; 0 or less: nil, no bound.
func NewPace(rows int) *Pace {
	if rows <= 0 {
		return nil
	}
	return &Pace{l: rate.NewLimiter(rate.Limit(rows), rows)}
}

// cap is the most rows one read may ask for under p.
func (p *Pace) cap(n int) int {
	if p == nil {
		return n
	}
	return max(min(n, p.l.Burst()), 1)
}

// paced is a reader's turn under a Pace: the rows reserved for its next
// read, and when that read may begin. Its reader's lock guards it.
type paced struct {
	res  *rate.Reservation // nil: none reserved
	rows int
	at   time.Time
}

// ready says whether a read of n rows may begin now under p, and how
// many rows it reads: the first time it is asked for that read, the rows
// are reserved (n, at most a second's worth), and the read reads as many
// as were reserved, whatever its reader would ask for by then. begin
// says the read began.
func (t *paced) ready(p *Pace, n int, now time.Time) (int, bool) {
	if p == nil {
		return n, true
	}
	if t.res == nil {
		t.rows = p.cap(n)
		t.res = p.l.ReserveN(now, t.rows)
		t.at = now.Add(t.res.DelayFrom(now))
	}
	return t.rows, !now.Before(t.at)
}

// begin spends the rows reserved: the next read reserves its own.
func (t *paced) begin() { t.res = nil }

// cancel gives back the rows reserved for a read that will not begin
// (its reader closed), to the node's other readers.
func (t *paced) cancel(now time.Time) {
	if t.res != nil {
		t.res.CancelAt(now)
		t.res = nil
	}
}

// MaxSnapshotRate bounds snapshot-rate=.
const MaxSnapshotRate = 100_000_000

// ParseSnapshotRate reads snapshot-rate= of a source URI: rows a second,
// 0 for no bound.
func ParseSnapshotRate(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxSnapshotRate {
		return 0, fmt.Errorf("source URI: snapshot-rate=%q: give the rows the initial snapshot reads a second at most on each node, across the changefeed's partitions there, 1 to %d (0 or unset: as fast as the database gives them)", v, MaxSnapshotRate)
	}
	return n, nil
}

// ParseChunkRows reads chunk-rows= of a source URI.
func ParseChunkRows(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		return 0, fmt.Errorf("source URI: chunk-rows=%q: give the rows one chunk of the initial snapshot reads at most, 1 to 1000000 (default %d)", v, DefaultChunkRows)
	}
	return n, nil
}
