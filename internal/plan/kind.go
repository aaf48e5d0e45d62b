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
