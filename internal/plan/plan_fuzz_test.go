package plan

import (
	"encoding/json"
	"io"
	"testing"
)

// FuzzPlanJSON: a plan file or a submitted plan is operator input. Any
// JSON that decodes as a plan can be checked against a cluster, diffed
// and rendered without a panic, whatever its kind, steps or fingerprint.
func FuzzPlanJSON(f *testing.F) {
	s := withSpans(snapshot(3, map[string]string{"a": "capture-1", "b": "capture-3"}, 3))
	for _, mk := range []func() (*Plan, error){
		func() (*Plan, error) { return Drain(s, "capture-3", 2, DefaultCosts) },
		func() (*Plan, error) { return Split(s, "p3", "x", DefaultCosts) },
		func() (*Plan, error) { return Move(s, "p2", "capture-1", DefaultCosts) },
		func() (*Plan, error) { return Rebalance(s, "a", 1, false, DefaultCosts) },
	} {
		p, err := mk()
		if err != nil {
			f.Fatal(err)
		}
		b, _ := json.Marshal(p)
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"kind":"move","batches":[{"steps":[{"kind":"move-partitions","spread":{"":-1}}]}],"fingerprint":{"objects":{"":0}}}`))
	f.Add([]byte(`{"batches":[{"steps":null}],"batch_size":-5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Plan
		if json.Unmarshal(b, &p) != nil {
			return
		}
		_ = p.Validate()
		_ = Check(&p, s)
		_ = Diff(s, &p)
		_ = Render(io.Discard, s, &p)
		_ = p.PartitionMoves()
		for _, batch := range p.Batches {
			for _, st := range batch.Steps {
				_ = StepText(st)
			}
		}
	})
}
