package maintainer

import (
	"context"
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition moved holds its changefeed's checkpoint at its hand-over
// until a position past it is persisted. The heartbeat that first brings
// one wakes the pass, which writes it at once (not after the
// checkpoint's cadence): also when the placement was heard from before,
// still at its hand-over. A position heard again, or one moving on
// after it, does not; nor does a partition that was never moved.
func TestAMovedPartitionsFirstPositionPastTheHandOverIsPersistedAtOnce(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	handOver := model.Ts(1000 << 18)
	h := hostOn(maintainedOnN2(cf, map[string]meta.RouteRecord{
		"moved": {Route: model.RouteEntry{ID: "moved", Changefeed: cf, Node: "n1", Epoch: 2, Status: model.PartitionActive, Start: handOver}},
		"stays": {Route: model.RouteEntry{ID: "stays", Changefeed: cf, Node: "n1", Epoch: 1, Status: model.PartitionActive}},
	}))
	beat := func(moved, stays model.Ts) (bool, []string) {
		t.Helper()
		msg, err := transport.NewMessage("n1", "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{
				{ID: "moved", Progress: model.Progress{Checkpoint: moved, Epoch: 2}},
				{ID: "stays", Progress: model.Progress{Checkpoint: stays, Epoch: 1}},
			}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
		h.mu.Lock()
		urgent, beyond := h.heard[cf].urgent, slices.Clone(h.heard[cf].beyond)
		h.heard[cf].urgent = false
		h.mu.Unlock()
		select {
		case <-h.wake:
		default:
		}
		return urgent, beyond
	}
	beat(handOver, handOver+1) // first heard: persisted at once anyway
	if urgent, beyond := beat(handOver, handOver+2); urgent || len(beyond) > 0 {
		t.Fatalf("positions still at the hand-over woke the pass (at once: %v)", beyond)
	}
	urgent, beyond := beat(handOver+3, handOver+3)
	if !urgent || !slices.Equal(beyond, []string{"moved"}) {
		t.Fatalf("the moved partition's first position past its hand-over: woke %v, at once %v; want true, [moved]", urgent, beyond)
	}
	// The pass's write takes them (as whatToSave's must: written however
	// recently the record was), once.
	if got := h.takeBeyond(cf); !slices.Equal(got, []string{"moved"}) {
		t.Fatalf("the write takes %v, want [moved]", got)
	}
	if got := h.takeBeyond(cf); len(got) > 0 {
		t.Fatalf("the next write takes %v again", got)
	}

	// A maintainer placed anew hears every partition for the first time:
	// a position past the hand-over persisted before is not written at
	// once again.
	h = hostOn(maintainedOnN2(cf, map[string]meta.RouteRecord{
		"moved": {Route: model.RouteEntry{ID: "moved", Changefeed: cf, Node: "n1", Epoch: 2, Status: model.PartitionActive, Start: handOver}},
		"stays": {Route: model.RouteEntry{ID: "stays", Changefeed: cf, Node: "n1", Epoch: 1, Status: model.PartitionActive}},
	}))
	h.view.State().Progress = map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
		"moved": {Progress: model.Progress{Checkpoint: handOver + 4, Node: "n1", Epoch: 2}},
	}}
	if _, beyond := beat(handOver+6, handOver+6); len(beyond) > 0 {
		t.Fatalf("a new maintainer's first heartbeat wrote at once %v, persisted past the hand-over already", beyond)
	}
	if urgent, beyond := beat(handOver+4, handOver+5); urgent || len(beyond) > 0 {
		t.Fatalf("a position moving on after it woke the pass (at once: %v)", beyond)
	}
}
