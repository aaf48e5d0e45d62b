package dispatcher

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// final is where a stopped dispatcher ended, waiting to be persisted:
// exact (Final) after a graceful stop, its checkpoint otherwise.
type final struct {
	cf  model.ChangefeedID
	pid string
	p   model.Progress
}

// progressOf is a running dispatcher's progress as its heartbeat reports
// it.
func progressOf(d *Dispatcher, node model.NodeID, epoch uint64) model.Progress {
	cp, copied := d.Progress()
	return model.Progress{Checkpoint: cp, Node: node, Epoch: epoch, Copy: copied}
}

// acked tells whether the maintainer has persisted a final position, or
// the partition has moved on (placed again, or removed).
func (f *final) acked(st *meta.State) bool {
	r, ok := st.Partitions[f.cf][f.pid]
	if !ok || r.Route.Epoch > f.p.Epoch {
		return true
	}
	p, ok := st.Progress[f.cf][f.pid]
	return ok && p.Progress.Epoch == f.p.Epoch && p.Progress.Checkpoint >= f.p.Checkpoint &&
		(p.Progress.Final || !f.p.Final) && (p.Progress.Handover || !f.p.Handover)
}

// heartbeat sends each changefeed's maintainer one message with the
// position of every partition of the changefeed running here, and every
// final position not yet acknowledged; acknowledged ones are forgotten.
func (m *Manager) heartbeat(ctx context.Context, st *meta.State) { m.beat(ctx, st, nil) }

// beat is heartbeat; with only, the messages of those changefeeds alone,
// with their positions and finals (an early one, copied.go: failed
// starts, recoveries and restarts wait for the regular one).
func (m *Manager) beat(ctx context.Context, st *meta.State, only map[model.ChangefeedID]bool) {
	byFeed := map[model.ChangefeedID][]transport.PartitionProgress{}
	failed := map[model.ChangefeedID][]transport.FailedStart{}
	m.mu.Lock()
	if only == nil {
		for _, f := range m.failed {
			failed[f.cf] = append(failed[f.cf], f.FailedStart)
			if _, ok := byFeed[f.cf]; !ok {
				byFeed[f.cf] = nil
			}
		}
		m.lastBeat = time.Now()
		m.copiedMu.Lock()
		clear(m.copiedSince) // reported in this one
		m.copiedMu.Unlock()
	}
	// Changefeed by changefeed, each list made once at its size: appended
	// partition by partition in the running map's order, the lists grew
	// by copies and each append looked its changefeed up again (a third
	// of the heartbeats' cost on a node of 33,000 partitions).
	m.indexRunningLocked()
	for cf, runs := range m.byFeed {
		if only != nil && !only[cf] {
			continue
		}
		parts := slices.Grow(byFeed[cf], len(runs))
		for k, r := range runs {
			rt := r.route.Route
			p := progressOf(r.d, m.self, rt.Epoch)
			m.reportedHandInLocked(k, p)
			parts = append(parts, transport.PartitionProgress{ID: rt.ID, Progress: p})
		}
		byFeed[cf] = parts
	}
	for k, f := range m.finals {
		if only != nil && !only[f.cf] {
			continue
		}
		if f.acked(st) {
			m.dropFinalLocked(k)
			continue
		}
		byFeed[f.cf] = append(byFeed[f.cf], transport.PartitionProgress{ID: f.pid, Progress: f.p})
	}
	var recover map[model.ChangefeedID][]transport.RecoverRequest
	var restarts map[model.ChangefeedID][]transport.Restart
	if only == nil {
		recover, restarts = m.requests(st), m.restartsToReport()
	}
	for cf := range recover {
		if _, ok := byFeed[cf]; !ok {
			byFeed[cf] = nil
		}
	}
	for cf := range restarts {
		if _, ok := byFeed[cf]; !ok {
			byFeed[cf] = nil
		}
	}
	m.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for cf, parts := range byFeed {
		e := st.Changefeeds[cf]
		if e == nil || e.MaintainerRevision == 0 || e.Maintainer.Node == "" {
			continue // no maintainer yet; the next heartbeat will do
		}
		compact, rest := transport.CompactPositions(parts)
		msg, err := transport.NewMessage(m.self, e.Maintainer.Node, transport.TopicHeartbeat,
			transport.Heartbeat{Changefeed: cf, MaintainerEpoch: e.Maintainer.Epoch, Partitions: rest, Compact: compact, Failed: failed[cf],
				Recover: recover[cf], Restarts: restarts[cf]})
		if err != nil {
			m.log.Error("cannot encode a heartbeat", "changefeed", cf, "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.tr.Send(sctx, msg); err != nil && ctx.Err() == nil {
				m.log.Debug("heartbeat not delivered; the next one replaces it", "changefeed", cf, "maintainer", msg.To, "err", err)
			}
		}()
	}
	wg.Wait()
}

// awaitHandover re-sends the final positions until they are persisted,
// so that whoever takes these partitions over starts exactly where they
// stopped; after HandoverTimeout it gives up (they resume from their last
// persisted position instead: duplicates, never loss).
func (m *Manager) awaitHandover() {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.HandoverTimeout)
	defer cancel()
	for {
		ch := m.view.Changed()
		m.heartbeat(ctx, m.view.State())
		m.mu.Lock()
		left := len(m.finals)
		m.mu.Unlock()
		if left == 0 {
			return
		}
		if m.noOneToAcknowledge(m.view.State()) {
			// The whole cluster is stopping (a playground's Ctrl-C, every
			// agent stopped at once): waiting changes nothing.
			m.log.Info("no capture is left to persist the final positions; their partitions will resume from their last persisted positions", "partitions", left)
			return
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			m.log.Warn("final positions not acknowledged in time; their partitions will resume from their last persisted positions", "partitions", left)
			return
		}
	}
}

// noOneToAcknowledge says that no capture can persist the final
// positions still waiting: the maintainers of their changefeeds have left
// the cluster, and no capture is Alive to be given their maintainers.
// A maintainer still registered (this node's own included: it persists
// as it stops) may yet acknowledge.
func (m *Manager) noOneToAcknowledge(st *meta.State) bool {
	for id := range st.Nodes {
		if st.LivenessOf(id) == model.LivenessAlive {
			return false
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.finals {
		if e := st.Changefeeds[f.cf]; e != nil {
			if _, registered := st.Nodes[e.Maintainer.Node]; registered {
				return false
			}
		}
	}
	return true
}

// A heartbeat carries every position of the node's partitions, one
// message per changefeed, and a changefeed's checkpoint cannot be
// persisted before the positions it is the least of are heard: the time
// between heartbeats is part of every changefeed's lag. A node of a few
// changefeeds and up to 2,000 partitions beats every minBeat; a larger
// one beats less often, so that it sends about beatMessages messages and
// beatPositions positions a second at most, up to the configured
// Interval.
const (
	minBeat       = 100 * time.Millisecond
	beatPositions = 20_000
	beatMessages  = 50
)

// beatEvery is the time between this node's heartbeats now.
func (m *Manager) beatEvery() time.Duration {
	m.mu.Lock()
	n := len(m.running)
	feeds := len(m.feeds)
	m.mu.Unlock()
	m.runningN.Store(int64(n))
	return beatInterval(n, feeds, m.cfg.Interval)
}

// wakeReads is about how many reads a second a node's idle partitions
// may make when their logs change: each waits at least a node's
// partitions / wakeReads after its last read before it wakes on a change
// (and never less than its base interval, 20 ms). A node of 400
// partitions wakes them at once; one of 3,200 or more no sooner than
// their back-off would have.
const wakeReads = 20_000

// wakeGap is dispatcher.Config.WakeGap for this node's dispatchers.
func (m *Manager) wakeGap() time.Duration {
	return max(defaultIdle, time.Duration(m.runningN.Load())*time.Second/wakeReads)
}

// beatInterval is the time between heartbeats of a node running n
// partitions of feeds changefeeds, at most most.
func beatInterval(n, feeds int, most time.Duration) time.Duration {
	return min(most, max(minBeat, time.Duration(n)*time.Second/beatPositions, time.Duration(feeds)*time.Second/beatMessages))
}
