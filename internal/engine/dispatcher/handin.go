package dispatcher

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition moved here holds its changefeed's checkpoint at its
// hand-over position until its maintainer persists a position past it.
// During a drain every changefeed has moves in flight, so each move's
// pause is about the changefeed's lag then. The first position past the
// hand-over is reported at once rather than at the next heartbeat (up
// to Interval later), in an early message to that changefeed's
// maintainer alone, which persists it at once (maintainer/progress.go).
// A partition is watched for handInWait; after it, or once a heartbeat
// carried such a position, the regular heartbeats report it.

// handInWait is how long a partition moved here is watched for its
// first position past its hand-over.
const handInWait = 2 * time.Second

// handIn is a partition moved here, watched: where it started, and when.
type handIn struct {
	cf    model.ChangefeedID
	from  model.Ts
	since time.Time
}

// watchHandInLocked watches a partition just started here from a hand-over
// position (its move's). Under m.mu.
func (m *Manager) watchHandInLocked(k string, cf model.ChangefeedID, from model.Ts) {
	m.handIns[k] = handIn{cf: cf, from: from, since: time.Now()}
}

// handInsPending fires when partitions moved here are watched, to look
// at them again: nil if none is. Every earlyBeatGap, not sooner: they
// stay watched until they run past their hand-over.
func (m *Manager) handInsPending() <-chan time.Time {
	m.mu.Lock()
	n := len(m.handIns)
	m.mu.Unlock()
	if n == 0 {
		return nil
	}
	return time.After(earlyBeatGap)
}

// handInsPast returns the changefeeds of which a partition moved here
// has run past its hand-over position since the last heartbeat, if the
// last early heartbeat for such was at least earlyBeatGap ago (else nil:
// they wait their turn). Partitions no longer running here, or watched
// for handInWait, are forgotten.
func (m *Manager) handInsPast() map[model.ChangefeedID]bool {
	if time.Since(m.lastHandIn) < earlyBeatGap {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out map[model.ChangefeedID]bool
	for k, h := range m.handIns {
		r, ok := m.running[k]
		if !ok || time.Since(h.since) >= handInWait {
			delete(m.handIns, k)
			continue
		}
		if cp, _ := r.d.Progress(); cp > h.from {
			if out == nil {
				out = map[model.ChangefeedID]bool{}
			}
			out[h.cf] = true
			delete(m.handIns, k)
		}
	}
	if out != nil {
		m.lastHandIn = time.Now()
	}
	return out
}

// reportedHandInLocked forgets a watched partition a heartbeat reports
// past its hand-over: it needs no early one. Under m.mu.
func (m *Manager) reportedHandInLocked(k string, p model.Progress) {
	if h, ok := m.handIns[k]; ok && p.Checkpoint > h.from {
		delete(m.handIns, k)
	}
}

// union is the changefeeds of both early heartbeats' reasons, one
// message each: nil if neither has any.
func union(a, b map[model.ChangefeedID]bool) map[model.ChangefeedID]bool {
	if a == nil {
		return b
	}
	for cf := range b {
		a[cf] = true
	}
	return a
}
