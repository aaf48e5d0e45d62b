package plan

import (
	"fmt"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ValidateMove applies seed 003's migration rules.
func ValidateMove(s *model.Snapshot, id string, to model.NodeID) (model.PartitionState, error) {
	p, err := findPartition(s, id)
	if err != nil {
		return p, err
	}
	if p.Route.Status == model.PartitionDraining {
		return p, busy(p.Route)
	}
	n, ok := s.Node(to)
	if !ok {
		return p, &Refusal{RefuseNotFound, fmt.Sprintf("cannot move %s to %s: capture not found", id, to), "list the captures with 'cdcctl capture list'"}
	}
	if !n.Liveness.IsSchedulable() {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot move %s to %s: it is %s and takes no new work", id, to, n.Liveness), "choose an Alive capture ('cdcctl capture list')"}
	}
	if p.Route.Node == to {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot move %s to %s: it is already there", id, to), "choose another capture"}
	}
	if p.Route.Node == "" {
		return p, &Refusal{RefuseInProgress, fmt.Sprintf("cannot move %s: it is not placed yet", id), "try again in a few seconds"}
	}
	return p, nil
}

// Move plans one partition's graceful move; the partition stays pinned
// there (the balance scheduler leaves it).
func Move(s *model.Snapshot, id string, to model.NodeID, costs Costs) (*Plan, error) {
	p, err := ValidateMove(s, id, to)
	if err != nil {
		return nil, err
	}
	r := p.Route
	out := &Plan{Version: 1, Kind: KindMove, Target: model.NodeID(id), BatchSize: 1,
		Fingerprint: fingerprintOf(s, partitionObject(r.Changefeed, r.ID), nodeObject(to), livenessObject(to), nodeObject(r.Node))}
	out.Batches = []Batch{{Steps: []Step{{Kind: StepMovePartition, Changefeed: string(r.Changefeed), Partition: r.ID, Table: r.Span.Table,
		From: r.Node, To: to, Reason: "requested by an operator; pinned there afterwards"}}}}
	out.PredictedMillis = predict(out.Batches, costs).Milliseconds()
	return out, nil
}
