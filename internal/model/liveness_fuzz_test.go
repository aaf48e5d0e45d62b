package model

import (
	"encoding/json"
	"testing"
)

// FuzzLivenessJSON: any input either decodes to one of the three states,
// which round-trips, or is refused.
func FuzzLivenessJSON(f *testing.F) {
	for _, s := range []string{`"Alive"`, `"draining"`, `"STOPPING"`, `0`, `""`, `null`, `"Zombie"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var l Liveness
		if err := json.Unmarshal([]byte(in), &l); err != nil {
			return
		}
		switch l {
		case LivenessAlive, LivenessDraining, LivenessStopping:
		default:
			t.Fatalf("%q decoded to %d", in, l)
		}
		b, _ := json.Marshal(l)
		var back Liveness
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Fatalf("round trip of %q failed", in)
		}
	})
}
