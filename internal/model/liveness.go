package model

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Liveness is a capture's lifecycle state as persisted in etcd. The numbers
// follow seed 000 so that logs and metrics read the same as there.
type Liveness int32

const (
	LivenessAlive    Liveness = 0 // accepts new work
	LivenessStopping Liveness = 1 // shutting down; accepts nothing
	LivenessDraining Liveness = 2 // being emptied; accepts nothing
	// LivenessUnknown stands for a record this agent cannot read (written
	// by a newer version, or damaged). It is never schedulable and never
	// campaigns: when in doubt, a node is kept out of the way.
	LivenessUnknown Liveness = -1
)

func (l Liveness) String() string {
	switch l {
	case LivenessAlive:
		return "Alive"
	case LivenessStopping:
		return "Stopping"
	case LivenessDraining:
		return "Draining"
	case LivenessUnknown:
		return "Unknown"
	}
	return fmt.Sprintf("Liveness(%d)", int32(l))
}

// ParseLiveness accepts the names String returns, in any case.
func ParseLiveness(s string) (Liveness, error) {
	switch strings.ToLower(s) {
	case "alive":
		return LivenessAlive, nil
	case "stopping":
		return LivenessStopping, nil
	case "draining":
		return LivenessDraining, nil
	}
	return 0, fmt.Errorf("unknown liveness %q: want Alive, Draining or Stopping", s)
}

func (l Liveness) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

func (l *Liveness) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("liveness must be a string: %w", err)
	}
	v, err := ParseLiveness(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// IsSchedulable reports whether a node in this state may receive new work.
// Every scheduler, and every user-requested move, asks this.
func (l Liveness) IsSchedulable() bool { return l == LivenessAlive }

// MayCampaign reports whether a node in this state may take part in the
// coordinator election. The only-node-left exception is not decided here:
// it first moves the node back to Alive (see TransitionOnlyNodeLeft).
func (l Liveness) MayCampaign() bool { return l == LivenessAlive }

// TransitionReason says why a transition is requested. Only one reason
// unlocks the way back to Alive.
type TransitionReason int

const (
	// ReasonNormal covers drain start, drain completion and graceful shutdown.
	ReasonNormal TransitionReason = iota
	// ReasonOnlyNodeLeft is seed 000's single exception: the last node of the
	// cluster, while Draining, returns to Alive so the cluster keeps a
	// coordinator.
	ReasonOnlyNodeLeft
)

// transitions is the whole liveness state machine. A test walks every pair.
var transitions = map[[2]Liveness]TransitionReason{
	{LivenessAlive, LivenessDraining}:    ReasonNormal,
	{LivenessDraining, LivenessStopping}: ReasonNormal,
	{LivenessAlive, LivenessStopping}:    ReasonNormal,
	{LivenessDraining, LivenessAlive}:    ReasonOnlyNodeLeft,
}

// CheckTransition returns nil when from→to is allowed for the given reason,
// and an error that names the rule otherwise. Staying in the same state is
// not a transition and is refused, so callers notice a no-op CAS.
func CheckTransition(from, to Liveness, reason TransitionReason) error {
	need, ok := transitions[[2]Liveness{from, to}]
	if !ok {
		return fmt.Errorf("liveness cannot go from %s to %s: allowed are Alive→Draining, Draining→Stopping, Alive→Stopping", from, to)
	}
	if need != reason {
		return fmt.Errorf("liveness cannot go from %s back to %s unless this is the only node left in the cluster", from, to)
	}
	return nil
}
