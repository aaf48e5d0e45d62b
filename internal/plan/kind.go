package plan

import "slices"

// Kind names what a plan does; each has one home in every layer (the
// planner here, the coordinator's file of the same name that drives it).
type Kind string

// Plan kinds. A drain's Target is the capture; a move's and a split's the
// partition id; a rebalance's the changefeed (seed 003); a rollout has
// none (its steps name the captures it restarts, one at a time).
const (
	KindDrain     Kind = "drain"
	KindMove      Kind = "move"
	KindSplit     Kind = "split"
	KindRebalance Kind = "rebalance"
	KindRollout   Kind = "rollout"
)

// Kinds are every kind a planner makes.
var Kinds = []Kind{KindDrain, KindMove, KindSplit, KindRebalance, KindRollout}

// Known says whether a planner makes plans of this kind.
func (k Kind) Known() bool { return slices.Contains(Kinds, k) }

// stepKinds are the steps each kind of plan is made of: a step of another
// kind has no one to carry it out in that plan's driver (it would stay
// pending, the plan Running for ever).
var stepKinds = map[Kind][]StepKind{
	KindDrain:     {StepSetLiveness, StepMoveMaintainer, StepMovePartitions},
	KindMove:      {StepMovePartition},
	KindSplit:     {StepSplitPartition},
	KindRebalance: {StepMovePartition},
	KindRollout:   {StepSetLiveness, StepMoveMaintainer, StepMovePartitions, StepResign, StepRestart, StepAwaitWork},
}

// Has says whether plans of this kind have steps of kind s.
func (k Kind) Has(s StepKind) bool { return slices.Contains(stepKinds[k], s) }
