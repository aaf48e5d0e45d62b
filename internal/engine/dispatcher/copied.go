package dispatcher

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The end of an initial snapshot is shown (changefeed get, a runbook
// waiting for it) once its maintainer persists that every partition has
// copied. The last copy on a node is reported at once rather than at
// the next heartbeat (up to Interval later): a heartbeat carries every
// position of the node, so this is done at most once per changefeed per
// node, when the node's last copying partition of it is done, and
// looked for at most every earlyBeatGap.

// earlyBeatGap is the least time between a heartbeat and one sent early
// for the end of a node's copies.
const earlyBeatGap = 100 * time.Millisecond

// copied records that a dispatcher of cf here finished its copy, and
// wakes the loop to see whether it was the node's last one.
func (m *Manager) copied(cf model.ChangefeedID) {
	m.mu.Lock()
	m.copiedSince[cf] = true
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// copiesPending fires when a copy that ended here may be the node's last
// of its changefeed and is not reported yet: nil if none is.
func (m *Manager) copiesPending() <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.copiedSince) == 0 {
		return nil
	}
	return time.After(max(earlyBeatGap-time.Since(m.lastBeat), 0))
}

// copiesEndedHere says a changefeed's last copying partition here
// finished since the last heartbeat, and that heartbeat was at least
// earlyBeatGap ago; the regular heartbeat reports any other.
func (m *Manager) copiesEndedHere() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.copiedSince) == 0 || time.Since(m.lastBeat) < earlyBeatGap {
		return false
	}
	ended := m.copiedSince
	m.copiedSince = map[model.ChangefeedID]bool{}
	for _, r := range m.running {
		cf := r.route.Route.Changefeed
		if ended[cf] {
			if _, copied := r.d.Progress(); !copied.Done {
				delete(ended, cf) // still copying here
			}
		}
	}
	return len(ended) > 0
}
