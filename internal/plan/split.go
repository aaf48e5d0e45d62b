package plan

import (
	"fmt"

	"github.com/cdcctl/cdcctl/internal/model"
)

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
