package eventlog

import (
	"math/rand/v2"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TestARowQueueHoldsWhatASliceWould checks the kept rows' blocks against a
// plain slice through random pushes and drops at both ends, across many
// blocks.
func TestARowQueueHoldsWhatASliceWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var q rowQueue
	var want []keptRow
	ts := model.Ts(0)
	for step := 0; step < 20000; step++ {
		switch r := rng.IntN(10); {
		case r < 6:
			for range rng.IntN(300) {
				ts++
				k := keptRow{seq: uint32(rng.IntN(3)), e: source.Event{CommitTs: ts}}
				q.push(k)
				want = append(want, k)
			}
		case r < 8:
			n := rng.IntN(len(want) + 1)
			q.dropFront(n)
			want = want[n:]
		default:
			n := rng.IntN(len(want)/4 + 1)
			q.dropBack(n)
			want = want[:len(want)-n]
		}
		if q.len() != len(want) {
			t.Fatalf("step %d: %d rows, want %d", step, q.len(), len(want))
		}
		for i := range want {
			if q.at(i).pos() != want[i].pos() {
				t.Fatalf("step %d: row %d at %+v, want %+v", step, i, q.at(i).pos(), want[i].pos())
			}
		}
		if len(want) > 0 {
			i := rng.IntN(len(want))
			if got := q.search(want[i].pos()); got != i {
				t.Fatalf("step %d: search found %d, want %d", step, got, i)
			}
		}
	}
}
