package plan

import (
	"fmt"
	"sort"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Rebalance plans evening out one changefeed's partitions over the
// schedulable captures with the fewest moves: while the most-loaded has
// more than one partition over the least-loaded, one moves between them.
// Moves run batch at a time. Partitions an operator pinned stay where
// they are unless movePinned (they then lose the pin).
func Rebalance(s *model.Snapshot, cf model.ChangefeedID, batch int, movePinned bool, costs Costs) (*Plan, error) {
	found := false
	for _, c := range s.Changefeeds {
		found = found || c.ID == cf
	}
	if !found {
		return nil, &Refusal{RefuseNotFound, fmt.Sprintf("changefeed %s not found", cf), "list them with 'cdcctl changefeed list'"}
	}
	batch = max(batch, 1)
	var schedulable []model.NodeID
	for _, n := range s.SchedulableNodes() {
		schedulable = append(schedulable, n.Info.ID)
	}
	if len(schedulable) == 0 {
		return nil, &Refusal{RefuseNoDestination, "cannot rebalance: no capture is Alive", "start a capture first"}
	}
	// Every capture, not only the schedulable: one that is not (Draining,
	// or Stopping until its process restarts) and stays so leaves the
	// plan valid, and becoming a destination again makes it stale. Read
	// the schedulable ones only, the plan was stale at once beside a
	// drained capture ("capture-3 appeared").
	objects := []string{maintainerObject(cf)}
	for _, n := range s.Nodes {
		objects = append(objects, nodeObject(n.Info.ID), livenessObject(n.Info.ID))
	}
	dest := NewDestinations(schedulable)
	perNode := map[model.NodeID][]model.RouteEntry{}
	var parts []model.PartitionState
	for _, p := range s.Partitions {
		if p.Route.Changefeed == cf {
			parts = append(parts, p)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Route.ID < parts[j].Route.ID })
	for _, p := range parts {
		objects = append(objects, partitionObject(cf, p.Route.ID))
		if p.Route.Status == model.PartitionDraining {
			return nil, busy(p.Route)
		}
		if dest.IsCandidate(p.Route.Node) {
			dest.Count(p.Route.Node)
			// A partition an operator moved by hand is pinned there: it
			// counts toward its capture's load, but the others move
			// around it (as the maintainer's own balancing does), unless
			// the operator says otherwise.
			if !p.Route.Pinned || movePinned {
				perNode[p.Route.Node] = append(perNode[p.Route.Node], p.Route)
			}
		}
	}
	out := &Plan{Version: 1, Kind: KindRebalance, Target: model.NodeID(cf), BatchSize: batch, Fingerprint: fingerprintOf(s, objects...)}
	out.Fingerprint.AllNodes = true
	var moves []Step
	for {
		from, fromLoad, to, toLoad := dest.Extremes()
		if from == "" || fromLoad-toLoad <= 1 || len(perNode[from]) == 0 {
			break
		}
		r := perNode[from][len(perNode[from])-1]
		perNode[from] = perNode[from][:len(perNode[from])-1]
		dest.Move(from, to)
		moves = append(moves, Step{Kind: StepMovePartition, Changefeed: string(cf), Partition: r.ID, Table: r.Span.Table, From: from, To: to,
			Reason: fmt.Sprintf("%s has %d of its partitions, %s has %d", from, fromLoad, to, toLoad)})
	}
	for i := 0; i < len(moves); i += batch {
		out.Batches = append(out.Batches, Batch{Steps: moves[i:min(i+batch, len(moves))]})
	}
	out.PredictedMillis = predict(out.Batches, costs).Milliseconds()
	return out, nil
}
