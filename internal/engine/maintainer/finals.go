package maintainer

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// AwaitFinals is the host's part of its node's graceful stop, called
// after the node's own dispatchers have stopped and before Run's context
// ends: the maintainers here keep running until every partition of their
// changefeeds that ran on another node now stopping has had its final
// position persisted, or that node has left the cluster, at most
// HandoverTimeout. When the whole cluster stops at once (a playground's
// Ctrl-C, a fleet's SIGTERM) no capture is left Alive to be given these
// maintainers: a node that stopped after them found no one to persist
// where its partitions ended, and they resumed from their last persisted
// positions, writing again what they had written since. A partition on a
// node not Stopping is not waited for (an Alive or Draining node may run
// on for hours; the coordinator gives these maintainers to an Alive one),
// nor is a changefeed whose maintainer has already moved away.
func (h *Host) AwaitFinals() {
	deadline := time.After(h.cfg.HandoverTimeout)
	for {
		ch := h.view.Changed()
		waiting := h.finalsAwaited(h.view.State())
		if waiting == 0 {
			return
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			h.log.Warn("maintainer: stopping before every stopping capture handed over its final positions; those partitions will resume from their last persisted positions", "partitions", waiting)
			return
		}
	}
}

// finalsAwaited counts the partitions of changefeeds maintained here
// that AwaitFinals waits for: heard running, at their placement's epoch,
// on another node that is registered and Stopping, whose
// final position is not persisted yet.
func (h *Host) finalsAwaited(st *meta.State) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for cf, e := range st.Changefeeds {
		rep := h.heard[cf]
		if e.Maintainer.Node != h.self || rep == nil || rep.epoch != e.Maintainer.Epoch {
			continue
		}
		for pid, r := range st.Partitions[cf] {
			node := r.Route.Node
			if node == h.self {
				continue // its dispatchers have stopped already
			}
			if _, registered := st.Nodes[node]; !registered || st.LivenessOf(node) != model.LivenessStopping {
				continue
			}
			if p, ok := rep.parts[pid]; !ok || p.Epoch != r.Route.Epoch || p.Node != node {
				continue // never heard running there: no final will come
			}
			if saved := st.Progress[cf][pid].Progress; saved.Epoch == r.Route.Epoch && saved.Final {
				continue
			}
			n++
		}
	}
	return n
}
