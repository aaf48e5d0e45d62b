// Package plan computes placements and plans from a snapshot of the
// cluster. It is pure: no I/O, no clock, no goroutines. The engine's
// schedulers and the CLI's dry runs call the same functions, so there is
// one placement policy with two callers.
//
// It imports model only.
package plan

import (
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Destinations tracks the load of candidate nodes while a scheduler places
// several things in one pass, so that one pass does not pile everything
// onto the node that was least loaded when it began (seed 000's
// selectDestination counts in-flight moves the same way).
type Destinations struct {
	candidates []model.NodeID
	load       map[model.NodeID]int
}

// NewDestinations starts from the schedulable nodes, in a stable order,
// each with no load.
func NewDestinations(schedulable []model.NodeID) *Destinations {
	d := &Destinations{candidates: schedulable, load: make(map[model.NodeID]int, len(schedulable))}
	for _, n := range schedulable {
		d.load[n] = 0
	}
	return d
}

// Count adds existing load to a node; nodes that are not candidates are
// ignored.
func (d *Destinations) Count(n model.NodeID) {
	if _, ok := d.load[n]; ok {
		d.load[n]++
	}
}

// IsCandidate reports whether n may receive work.
func (d *Destinations) IsCandidate(n model.NodeID) bool {
	_, ok := d.load[n]
	return ok
}

// Next returns the least-loaded candidate (the first in order on a tie)
// and counts the new assignment; false when there is no candidate.
func (d *Destinations) Next() (model.NodeID, bool) {
	if len(d.candidates) == 0 {
		return "", false
	}
	best := d.candidates[0]
	for _, c := range d.candidates[1:] {
		if d.load[c] < d.load[best] {
			best = c
		}
	}
	d.load[best]++
	return best, true
}

// NextExcept is Next among the candidates skip does not rule out.
func (d *Destinations) NextExcept(skip func(model.NodeID) bool) (model.NodeID, bool) {
	best, found := model.NodeID(""), false
	for _, c := range d.candidates {
		if skip(c) {
			continue
		}
		if !found || d.load[c] < d.load[best] {
			best, found = c, true
		}
	}
	if found {
		d.load[best]++
	}
	return best, found
}

// Extremes returns the most- and the least-loaded candidates with their
// loads (the first in order on a tie); empty when there are none.
func (d *Destinations) Extremes() (most model.NodeID, mostLoad int, least model.NodeID, leastLoad int) {
	for i, c := range d.candidates {
		if i == 0 || d.load[c] > mostLoad {
			most, mostLoad = c, d.load[c]
		}
		if i == 0 || d.load[c] < leastLoad {
			least, leastLoad = c, d.load[c]
		}
	}
	return most, mostLoad, least, leastLoad
}

// String lists the candidates with their loads, in order
// ("capture-1=3 capture-2=4"), for logs that explain a choice.
func (d *Destinations) String() string {
	var b strings.Builder
	for i, c := range d.candidates {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", c, d.load[c])
	}
	return b.String()
}

// Move shifts one unit of load, for a move just planned.
func (d *Destinations) Move(from, to model.NodeID) {
	d.load[from]--
	d.load[to]++
}
