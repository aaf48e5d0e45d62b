package model

import (
	"encoding/json"
	"testing"
)

// TestLivenessTransitions walks every (from, to, reason) triple and checks it
// against the rules of seed 000: Alive→Draining, Draining→Stopping and
// Alive→Stopping always; Draining→Alive only when the node is the last one
// left; nothing else, ever.
func TestLivenessTransitions(t *testing.T) {
	states := []Liveness{LivenessAlive, LivenessDraining, LivenessStopping}
	type key struct {
		from, to Liveness
		reason   TransitionReason
	}
	allowed := map[key]bool{
		{LivenessAlive, LivenessDraining, ReasonNormal}:       true,
		{LivenessDraining, LivenessStopping, ReasonNormal}:    true,
		{LivenessAlive, LivenessStopping, ReasonNormal}:       true,
		{LivenessDraining, LivenessAlive, ReasonOnlyNodeLeft}: true,
	}
	for _, from := range states {
		for _, to := range states {
			for _, reason := range []TransitionReason{ReasonNormal, ReasonOnlyNodeLeft} {
				err := CheckTransition(from, to, reason)
				want := allowed[key{from, to, reason}]
				if want && err != nil {
					t.Errorf("%s→%s (reason %d): refused: %v", from, to, reason, err)
				}
				if !want && err == nil {
					t.Errorf("%s→%s (reason %d): allowed, want refused", from, to, reason)
				}
			}
		}
	}
}

func TestLivenessSchedulingAndCampaign(t *testing.T) {
	for _, tc := range []struct {
		l                 Liveness
		schedulable, camp bool
	}{
		{LivenessAlive, true, true},
		{LivenessDraining, false, false},
		{LivenessStopping, false, false},
	} {
		if got := tc.l.IsSchedulable(); got != tc.schedulable {
			t.Errorf("%s.IsSchedulable() = %v", tc.l, got)
		}
		if got := tc.l.MayCampaign(); got != tc.camp {
			t.Errorf("%s.MayCampaign() = %v", tc.l, got)
		}
	}
}

func TestLivenessJSON(t *testing.T) {
	for _, l := range []Liveness{LivenessAlive, LivenessDraining, LivenessStopping} {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Liveness
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Fatalf("round trip of %s via %s: got %v, %v", l, b, back, err)
		}
	}
	var l Liveness
	if err := json.Unmarshal([]byte(`"Zombie"`), &l); err == nil {
		t.Fatal("unknown liveness accepted")
	}
}
