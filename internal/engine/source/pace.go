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

// reserve takes n rows from the rate and says when they may be read.
func (p *Pace) reserve(n int, now time.Time) time.Time {
	r := p.l.ReserveN(now, p.cap(n))
	return now.Add(r.DelayFrom(now))
}

// paced is a reader's turn under a Pace: rows reserved for its next
// read, and when that read may begin. Its reader's lock guards it.
type paced struct {
	paid bool
	at   time.Time
}

// ready says a read of n rows may begin now under p, reserving them the
// first time it is asked for that read; begin says it began.
func (t *paced) ready(p *Pace, n int, now time.Time) bool {
	if p == nil {
		return true
	}
	if !t.paid {
		t.paid, t.at = true, p.reserve(n, now)
	}
	return !now.Before(t.at)
}

// begin spends the rows reserved: the next read reserves its own.
func (t *paced) begin() { t.paid = false }

// waiting says rows are reserved for a read not yet begun.
func (t *paced) waiting() bool {
	return t.paid
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
