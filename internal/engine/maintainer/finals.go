package maintainer

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
)

// AwaitFinals is the host's part of its node's graceful stop, called
// after the node's own dispatchers have stopped and before Run's context
// ends. A changefeed maintained here whose partitions ran on other nodes
// keeps its maintainer here until one of three things: its maintainer is
// placed elsewhere (the coordinator moves the maintainers of a Stopping
// node to an Alive one), each of those partitions has had its final
// position persisted (its node is stopping too), or their nodes have left
// the cluster; at most HandoverTimeout. When the whole cluster stops at
// once (a playground's Ctrl-C, a fleet's SIGTERM a moment apart) no
// capture is left Alive to be given these maintainers: a node that
// stopped after them found no one to persist where its partitions ended,
// and they resumed from their last persisted positions, writing again
// what they had written since. A node not yet Stopping when this one
// looked is waited for too: it either takes the maintainer (Alive) or
// stops and hands its positions over.
//
// A partition whose node stops without a final position (its sink
// failing as it stops) is waited for until that node has left, which it
// does once this maintainer persisted what it reported; two such nodes
// waiting on each other wait out HandoverTimeout.
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
			h.log.Warn("maintainer: stopping before every other capture handed over its partitions' final positions or took the maintainer; those partitions will resume from their last persisted positions", "partitions", waiting)
			return
		}
	}
}

// finalsAwaited counts the partitions of changefeeds maintained here
// that AwaitFinals waits for: placed on another node still registered,
// their final position at that placement not persisted yet. Whether the
// partition was heard running there does not count: one placed there a
// moment ago (a capture stopping moves its partitions to those still
// Alive) may be writing before its first heartbeat has come; one that
// never started has its node leave soon, or this maintainer move.
func (h *Host) finalsAwaited(st *meta.State) int {
	n := 0
	for cf, e := range st.Changefeeds {
		if e.Maintainer.Node != h.self {
			continue
		}
		for pid, r := range st.Partitions[cf] {
			node := r.Route.Node
			if node == h.self {
				continue // its dispatchers have stopped already
			}
			if _, registered := st.Nodes[node]; !registered {
				continue
			}
			if saved := st.Progress[cf][pid].Progress; saved.Epoch == r.Route.Epoch && saved.Final {
				continue
			}
			n++
		}
	}
	return n
}
