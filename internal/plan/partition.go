package plan

import (
	"fmt"
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// BusyError refuses an operation on a partition that is being moved or
// split (seed 003's ErrPartitionBusy): retry when it is Active again.
type BusyError struct {
	Partition string
	Doing     string
	Since     time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("partition %s is busy: %s", e.Partition, e.Doing)
}

func busy(r model.RouteEntry) *BusyError {
	doing := fmt.Sprintf("moving %s → %s", r.Node, r.Target)
	if r.SplitKey != "" {
		doing = fmt.Sprintf("being split at %q on %s", model.DecodeKey(r.Span.Key, r.SplitKey), r.Node)
	}
	return &BusyError{Partition: r.ID, Doing: doing, Since: r.BusySince}
}

func findPartition(s *model.Snapshot, id string) (model.PartitionState, error) {
	for _, p := range s.Partitions {
		if p.Route.ID != id {
			continue
		}
		for _, cf := range s.Changefeeds {
			if cf.ID == p.Route.Changefeed && cf.State != model.ChangefeedNormal {
				// Its maintainer places nothing while it is paused: the
				// operation would wait, busy, until a resume.
				return p, &Refusal{RefuseInvalid, fmt.Sprintf("partition %s: changefeed %s is %s", id, cf.ID, cf.State),
					"resume it first ('cdcctl changefeed resume " + string(cf.ID) + "')"}
			}
		}
		return p, nil
	}
	return model.PartitionState{}, &Refusal{RefuseNotFound, fmt.Sprintf("partition %s not found", id), "list them with 'cdcctl partition list'"}
}

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

// ValidateSplit applies seed 003's split rules to a key as an operator
// typed it (its text form).
func ValidateSplit(s *model.Snapshot, id, key string) (model.PartitionState, error) {
	p, err := findPartition(s, id)
	if err != nil {
		return p, err
	}
	if p.Route.Span.Key == model.NoKey {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot split %s: table %s has no primary key, so it is one partition that cannot be split", id, p.Route.Span.Table),
			"add a primary key to the table (ALTER TABLE ... ADD PRIMARY KEY) and create the changefeed again to split it; a move still works"}
	}
	enc, err := model.EncodeKey(p.Route.Span.Key, key)
	if err != nil {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot split %s: %v", id, err), "give the key as text, e.g. --key 1500 for an integer key ('cdcctl partition get " + id + "' shows the range)"}
	}
	if err := p.Route.Span.ValidSplitKey(enc); err != nil {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot split %s %s: %v", id, p.Route.Span, err), "choose a key inside the partition's range ('cdcctl partition get " + id + "')"}
	}
	if p.Route.Status == model.PartitionDraining {
		return p, busy(p.Route)
	}
	if p.Route.Node == "" {
		return p, &Refusal{RefuseInProgress, fmt.Sprintf("cannot split %s: it is not placed yet", id), "try again in a few seconds"}
	}
	if n, ok := s.Node(p.Route.Node); ok && !n.Liveness.IsSchedulable() {
		return p, &Refusal{RefuseInvalid, fmt.Sprintf("cannot split %s: its capture %s is %s", id, p.Route.Node, n.Liveness), "split it once it has moved to an Alive capture"}
	}
	return p, nil
}

// Split plans cutting one partition at key; both halves stay on its
// capture (move one afterwards if needed).
func Split(s *model.Snapshot, id, key string, costs Costs) (*Plan, error) {
	p, err := ValidateSplit(s, id, key)
	if err != nil {
		return nil, err
	}
	r := p.Route
	// The step carries the key as the routing table compares it (encoded
	// for a database table's typed key) and as the operator typed it.
	enc, _ := model.EncodeKey(r.Span.Key, key)
	out := &Plan{Version: 1, Kind: KindSplit, Target: model.NodeID(id), BatchSize: 1,
		Fingerprint: fingerprintOf(s, partitionObject(r.Changefeed, r.ID), nodeObject(r.Node), livenessObject(r.Node))}
	step := Step{Kind: StepSplitPartition, Changefeed: string(r.Changefeed), Partition: r.ID, Table: r.Span.Table,
		From: r.Node, To: r.Node, Key: enc, Reason: "requested by an operator; the upper half gets a new id"}
	if enc != key {
		step.KeyText = key
	}
	out.Batches = []Batch{{Steps: []Step{step}}}
	out.PredictedMillis = predict(out.Batches, costs).Milliseconds()
	return out, nil
}

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
	objects := []string{maintainerObject(cf)}
	for _, n := range schedulable {
		objects = append(objects, nodeObject(n), livenessObject(n))
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
