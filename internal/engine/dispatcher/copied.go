package dispatcher

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The end of an initial snapshot is shown (changefeed get, a runbook
// waiting for it) once its maintainer persists that every partition has
// copied. The last copy on a node is reported at once rather than at
// the next heartbeat (up to Interval later), in a message to that
// changefeed's maintainer alone: once per changefeed per node, when the
// node's last copying partition of it is done. The node looks for such
// ends at most every earlyBeatGap, so that thousands of one-table
// changefeeds ending their copies one after another cost a few scans of
// its partitions a second, not one each.

// earlyBeatGap is the least time between two early heartbeats.
const earlyBeatGap = 100 * time.Millisecond

// copied records that a dispatcher of cf here finished its copy, and
// wakes the loop to see whether it was the node's last one. It is called
// from a sink's acknowledgement, which a sink may make while the manager
// holds m.mu (closing the sink), so it takes only copiedMu.
func (m *Manager) copied(cf model.ChangefeedID) {
	m.copiedMu.Lock()
	m.copiedSince[cf] = true
	m.copiedMu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// copiesPending fires when a copy that ended here may be the node's last
// of its changefeed and is not reported yet: nil if none is.
func (m *Manager) copiesPending() <-chan time.Time {
	m.copiedMu.Lock()
	defer m.copiedMu.Unlock()
	if len(m.copiedSince) == 0 {
		return nil
	}
	return time.After(max(earlyBeatGap-time.Since(m.lastEarly), 0))
}

// copiesEndedHere returns the changefeeds whose last copying partition
// here finished since the last heartbeat, if the last early heartbeat
// was at least earlyBeatGap ago (else nil, and they wait their turn);
// the regular heartbeat reports any other.
func (m *Manager) copiesEndedHere() map[model.ChangefeedID]bool {
	m.copiedMu.Lock()
	if len(m.copiedSince) == 0 || time.Since(m.lastEarly) < earlyBeatGap {
		m.copiedMu.Unlock()
		return nil
	}
	ended := m.copiedSince
	m.copiedSince = map[model.ChangefeedID]bool{}
	m.lastEarly = time.Now()
	m.copiedMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexRunningLocked()
	for cf := range ended {
		for _, r := range m.byFeed[cf] {
			if _, copied := r.d.Progress(); !copied.Done {
				delete(ended, cf) // still copying here
				break
			}
		}
	}
	if len(ended) == 0 {
		return nil
	}
	return ended
}
