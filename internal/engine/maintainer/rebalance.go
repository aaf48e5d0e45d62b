package maintainer

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The balance scheduler (DESIGN §6); the moves it starts are carried
// through by move.go.

// rebalance starts graceful moves: first off nodes that may not keep work
// (Draining), then from the most- to the least-loaded node while they
// differ by more than one.
func (h *Host) rebalance(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, routes []meta.RouteRecord, dest *plan.Destinations, inFlight int) (moved bool, err error) {
	if inFlight >= MaxMovesInFlight {
		return false, nil
	}
	var movable []meta.RouteRecord
	perNode := map[model.NodeID][]meta.RouteRecord{}
	for _, r := range routes {
		if r.Route.Status != model.PartitionActive || r.Route.Node == "" {
			continue
		}
		if _, alive := st.Nodes[r.Route.Node]; !alive {
			continue
		}
		if st.LivenessOf(r.Route.Node) == model.LivenessDraining {
			if st.Drain != nil && st.Drain.Target == r.Route.Node && st.Drain.Hold != "" {
				continue // the drain's plan is paused or held: nothing more moves off
			}
			movable = append(movable, r)
		} else if dest.IsCandidate(r.Route.Node) && !r.Route.Pinned {
			perNode[r.Route.Node] = append(perNode[r.Route.Node], r)
		}
	}
	// The moves start in one transaction: a drain starts a changefeed's
	// moves together, and one write each made a pass four etcd round
	// trips long while the whole cluster was busy.
	var moves []meta.Placement
	for len(movable) > 0 && inFlight < MaxMovesInFlight {
		target, ok := dest.Next()
		if !ok {
			break
		}
		moves = append(moves, meta.Placement{Route: movable[0], Node: target})
		movable, inFlight = movable[1:], inFlight+1
	}
	// A paused changefeed's partitions leave Draining captures only: the
	// load is balanced when it runs again, and moves meanwhile refused its
	// updates ("being moved") with no plan running.
	for inFlight < MaxMovesInFlight && len(movable) == 0 && e.Status.State == model.ChangefeedNormal {
		from, fromLoad, to, toLoad := dest.Extremes()
		if from == "" || fromLoad-toLoad <= 1 || len(perNode[from]) == 0 {
			break
		}
		r := perNode[from][len(perNode[from])-1]
		perNode[from] = perNode[from][:len(perNode[from])-1]
		h.log.Debug("maintainer: balance: the most-loaded capture gives a partition to the least-loaded", "changefeed", e.Info.ID,
			"from", from, "from_load", fromLoad, "to", to, "to_load", toLoad, "loads", dest.String(), "moves_in_flight", inFlight)
		moves = append(moves, meta.Placement{Route: r, Node: to})
		dest.Move(from, to)
		inFlight++
	}
	if len(moves) == 0 {
		return false, nil
	}
	if err := h.store.StartMoves(ctx, mf, moves); err != nil {
		return false, err
	}
	for _, m := range moves {
		if st.LivenessOf(m.Route.Route.Node) == model.LivenessDraining {
			h.log.Info("maintainer: moving a partition off a Draining node", "partition", m.Route.Route.ID, "from", m.Route.Route.Node, "to", m.Node)
		} else {
			h.log.Info("maintainer: balancing", "partition", m.Route.Route.ID, "from", m.Route.Route.Node, "to", m.Node)
		}
	}
	return true, nil
}
