package eventlog

// The room the event logs of a node share for the rows they keep in
// memory. A log keeps no more than half of it; when the logs together
// hold more, the one that holds the oldest row writes its oldest rows
// into its store, whichever log's append found the room full. Positions
// are times, comparable across changefeeds: the changefeeds that move
// keep their newest rows in memory, and the ones whose sinks are down
// (their rows neither read nor trimmed) give theirs up first.

import (
	"sync"
	"sync/atomic"
)

// Memory is the room the event logs of a node share for the rows they
// keep in memory.
type Memory struct {
	max  int64
	used atomic.Int64

	mu   sync.Mutex
	logs map[*Log]struct{}
}

// DefaultMemory is an agent's room unless --log-memory-mib says
// otherwise: a moderate stream's rows, read and checkpointed within a
// second or two, never reach the store. A log keeps at most half of it
// once an Append is done (a transaction appended whole is held until
// then); a large transaction's parts go to disk as they come.
const DefaultMemory = 128 << 20

// NewMemory makes a room of bytes for the logs that share it.
func NewMemory(bytes int64) *Memory { return &Memory{max: bytes, logs: map[*Log]struct{}{}} }

// Used is what the logs sharing the room keep in it now.
func (m *Memory) Used() int64 { return m.used.Load() }

func (m *Memory) join(l *Log) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logs[l] = struct{}{}
}

func (m *Memory) leave(l *Log) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.logs, l)
}

// balance brings the logs within the room, if they hold more: the log
// that holds the oldest row spills until they are, then the next. It is
// called with no log's lock held (it takes each one's in turn).
func (m *Memory) balance() {
	// Passed over: logs busy with another writer or reader (waiting for
	// one would tie this changefeed's pace to that one's), and logs whose
	// spill failed (a full disk must not take every round).
	passed := map[*Log]bool{}
	for tries := 0; m.used.Load() > m.max && tries < 8; tries++ {
		var oldest *Log
		m.mu.Lock()
		for l := range m.logs {
			if !passed[l] && l.tail.held.Load() > 0 && (oldest == nil || l.tail.oldest.Load() < oldest.tail.oldest.Load()) {
				oldest = l
			}
		}
		m.mu.Unlock()
		if oldest == nil {
			return
		}
		if !oldest.mu.TryLock() {
			passed[oldest] = true
			continue
		}
		// A spill may write more than the room is over by (another log's
		// whole transaction counts until that log spills it); a spill
		// that fails leaves the rows in memory, over the room until a
		// later one succeeds.
		if oldest.closed || oldest.spill(oldest.tail.overRoom) != nil {
			passed[oldest] = true
		}
		oldest.mu.Unlock()
	}
}

// balance brings the node's logs within their room, if an append of this
// log found them over it. l.mu is not held.
func (l *Log) balance() {
	if m := l.tail.mem; m != nil && m.used.Load() > m.max {
		m.balance()
	}
}
