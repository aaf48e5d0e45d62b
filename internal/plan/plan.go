package plan

import (
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// StepKind names what a step does.
type StepKind string

const (
	StepSetLiveness    StepKind = "set-liveness"
	StepMoveMaintainer StepKind = "move-maintainer"
	StepMovePartition  StepKind = "move-partition"
	// StepMovePartitions moves all of one changefeed's partitions off a
	// capture; its maintainer does it, at most a few at a time. Spread
	// says how many are predicted to go where.
	StepMovePartitions StepKind = "move-partitions"
	// StepSplitPartition cuts one partition at Key; both halves stay on
	// its capture (seed 003's split).
	StepSplitPartition StepKind = "split-partition"
	// A rollout's own steps, each naming its capture in To: hand the
	// coordinator role over, restart (the capture exits when asked and
	// its service manager starts it again; done when it is back Alive as
	// a new incarnation), and wait until it is given work again.
	StepResign    StepKind = "resign-coordinator"
	StepRestart   StepKind = "restart-capture"
	StepAwaitWork StepKind = "await-work"
)

// Step is one change a plan makes.
type Step struct {
	Kind       StepKind     `json:"kind"`
	Changefeed string       `json:"changefeed,omitempty"`
	Partition  string       `json:"partition,omitempty"`
	Table      string       `json:"table,omitempty"`
	From       model.NodeID `json:"from,omitempty"`
	To         model.NodeID `json:"to,omitempty"`
	Liveness   string       `json:"liveness,omitempty"`
	// Key: where a split cuts, as the routing table compares keys;
	// KeyText, for a database table's typed key, as the operator typed it.
	Key     string `json:"key,omitempty"`
	KeyText string `json:"key_text,omitempty"`
	// Count and Spread: with move-partitions, how many and where to.
	Count  int                  `json:"count,omitempty"`
	Spread map[model.NodeID]int `json:"spread,omitempty"`
	// Reason says why this step, in the words of the policy that chose it.
	Reason string `json:"reason"`
}

// Batch is a set of steps that run together; the next batch starts when
// all of them are done.
type Batch struct {
	Steps []Step `json:"steps"`
}

// Plan is an ordered list of batches computed from one snapshot, with the
// fingerprint of what it read.
type Plan struct {
	Version int `json:"version"`
	// ID is given when the plan is submitted.
	ID          string       `json:"id,omitempty"`
	Kind        Kind         `json:"kind"`
	Target      model.NodeID `json:"target,omitempty"`
	BatchSize   int          `json:"batch_size"`
	Batches     []Batch      `json:"batches"`
	Fingerprint Fingerprint  `json:"fingerprint"`
	// PredictedMillis is the expected duration under the Costs used.
	PredictedMillis int64 `json:"predicted_ms"`
	// RestartBy, in a rollout, is who restarts each drained capture: ""
	// the capture itself (asked to exit; its service manager starts it
	// again), RestartByHook the hook of the cdcctl that follows the plan
	// (rollout upgrade --exec).
	RestartBy string `json:"restart_by,omitempty"`
}

// MaxBatch bounds a plan's batch size, the same for every way a plan is
// made or submitted.
const MaxBatch = 1000

// Validate refuses a plan that no planner makes: an unknown version or kind,
// a step its kind does not have, a batch size outside 1..MaxBatch, or no
// fingerprint (without it a plan
// cannot be checked against what it read). A plan file edited by hand is
// checked like the API's own requests.
func (p *Plan) Validate() error {
	switch {
	case p.Version != 1:
		return fmt.Errorf("plan version %d: want 1 (compute the plan again with --dry-run --plan-out FILE)", p.Version)
	case !p.Kind.Known():
		return fmt.Errorf("plan kind %q: want drain, move, split, rebalance or rollout", p.Kind)
	case p.BatchSize < 1 || p.BatchSize > MaxBatch:
		return fmt.Errorf("batch_size %d is out of range: use a batch between 1 and %d", p.BatchSize, MaxBatch)
	case p.RestartBy != "" && (p.Kind != KindRollout || p.RestartBy != RestartByHook):
		return fmt.Errorf("restart_by %q: only a rollout's restarts may be %q (or none: the capture restarts itself)", p.RestartBy, RestartByHook)
	case len(p.Fingerprint.Objects) == 0:
		return fmt.Errorf("the plan has no fingerprint: compute it with --dry-run --plan-out FILE and submit that file")
	}
	for i, b := range p.Batches {
		for _, s := range b.Steps {
			if !p.Kind.Has(s.Kind) {
				return fmt.Errorf("batch %d has a %q step, which a %s plan does not have (a plan file edited by hand, or made by a cdcctl of another version): compute the plan again with this cluster's version, --dry-run --plan-out FILE", i+1, s.Kind, p.Kind)
			}
		}
	}
	return nil
}

// Steps counts the plan's steps of one kind.
func (p *Plan) Steps(kind StepKind) int {
	n := 0
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			if s.Kind == kind {
				n++
			}
		}
	}
	return n
}

// PartitionMoves counts the partitions the plan moves.
func (p *Plan) PartitionMoves() int {
	n := 0
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			switch s.Kind {
			case StepMovePartition:
				n++
			case StepMovePartitions:
				n += s.Count
			}
		}
	}
	return n
}

// Costs is the duration model behind predictions: how long one step of
// each kind takes. It is an input so that the planner stays pure; the
// engine can feed it measured values.
type Costs struct {
	LivenessChange time.Duration
	MaintainerMove time.Duration
	PartitionMove  time.Duration
	// PartitionsInFlight is how many partition moves run at once.
	PartitionsInFlight int
	// CaptureRestart: from a capture asked to restart to it back Alive
	// (its process stops, its service manager starts it, it joins).
	CaptureRestart time.Duration
}

// DefaultCosts are rough loopback values, good enough to order plans.
var DefaultCosts = Costs{LivenessChange: 50 * time.Millisecond, MaintainerMove: 500 * time.Millisecond, PartitionMove: 300 * time.Millisecond, PartitionsInFlight: 4, CaptureRestart: 5 * time.Second}

func (c Costs) of(s Step) time.Duration {
	switch s.Kind {
	case StepMoveMaintainer:
		return c.MaintainerMove
	case StepMovePartition:
		return c.PartitionMove
	case StepMovePartitions:
		rounds := (s.Count + max(1, c.PartitionsInFlight) - 1) / max(1, c.PartitionsInFlight)
		return time.Duration(rounds) * c.PartitionMove
	case StepRestart:
		return c.CaptureRestart
	}
	return c.LivenessChange
}

// predict sums, over batches, the slowest step of each batch.
func predict(batches []Batch, c Costs) time.Duration {
	var total time.Duration
	for _, b := range batches {
		var slowest time.Duration
		for _, s := range b.Steps {
			slowest = max(slowest, c.of(s))
		}
		total += slowest
	}
	return total
}
