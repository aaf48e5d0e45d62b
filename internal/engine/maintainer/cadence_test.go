package maintainer

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A large changefeed's maintainer passes at once when something it must
// act on changed, and otherwise at most every passGap; a small one passes
// whenever asked.
func TestALargeChangefeedPassesWhenThereIsNews(t *testing.T) {
	state := func(cf model.ChangefeedID, partitions int) *meta.State {
		routes := make(map[string]meta.RouteRecord, partitions)
		for i := range partitions {
			id := fmt.Sprintf("p%d", i)
			routes[id] = meta.RouteRecord{Route: model.RouteEntry{ID: id, Changefeed: cf, Node: "n1", Epoch: 1}}
		}
		return &meta.State{
			Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {Info: model.ChangefeedInfo{ID: cf}}},
			Partitions:  map[model.ChangefeedID]map[string]meta.RouteRecord{cf: routes},
			Nodes:       map[model.NodeID]meta.NodeEntry{"n1": {Revision: 5}},
			Liveness:    map[model.NodeID]meta.LivenessEntry{"n1": {Revision: 6}},
		}
	}
	h := &Host{heard: map[model.ChangefeedID]*heard{}}
	now := time.Unix(1_700_000_000, 0)
	big := state("big", 100_000)
	e := big.Changefeeds["big"]
	step := func(st *meta.State, at time.Duration, want bool, what string) {
		t.Helper()
		if got := h.duePass(st, st.Changefeeds["big"], now.Add(at)); got != want {
			t.Fatalf("%s: due %v, want %v", what, got, want)
		}
	}
	step(big, 0, true, "the first pass")
	step(big, 100*time.Millisecond, false, "only positions moved, 100 ms later")
	step(big, 900*time.Millisecond, false, "only positions moved, 900 ms later")
	step(big, 1000*time.Millisecond, true, "after the gap (1 s at 100,000 partitions)")

	h.heard["big"] = &heard{urgent: true}
	step(big, 1100*time.Millisecond, true, "a heartbeat brought a final position")
	step(big, 1200*time.Millisecond, false, "the urgent mark was taken by that pass")

	moved := *big
	moved.Partitions = map[model.ChangefeedID]map[string]meta.RouteRecord{"big": state("big", 100_000).Partitions["big"]}
	step(&moved, 1300*time.Millisecond, true, "the routing table changed")

	status := moved
	entry := *e
	entry.Status.CheckpointTs = 42
	status.Changefeeds = map[model.ChangefeedID]*meta.ChangefeedEntry{"big": &entry}
	step(&status, 1400*time.Millisecond, false, "only the changefeed's checkpoint changed (its maintainer wrote it)")
	paused := status
	pausedEntry := entry
	pausedEntry.Status.State = model.ChangefeedPaused
	paused.Changefeeds = map[model.ChangefeedID]*meta.ChangefeedEntry{"big": &pausedEntry}
	step(&paused, 1400*time.Millisecond, true, "the changefeed was paused")
	status = paused

	dead := status
	dead.Liveness = map[model.NodeID]meta.LivenessEntry{"n1": {Revision: 9}}
	step(&dead, 1500*time.Millisecond, true, "a node's liveness changed")
	step(&dead, 1600*time.Millisecond, false, "nothing new since")

	small := state("big", 500)
	step(small, 1700*time.Millisecond, true, "a small changefeed")
	step(small, 1701*time.Millisecond, false, "a small changefeed, again at once with nothing new")
	step(small, 1700*time.Millisecond+passGap(500), true, "a small changefeed, after its gap")
	smallMoved := *small
	smallMoved.Partitions = map[model.ChangefeedID]map[string]meta.RouteRecord{"big": state("big", 500).Partitions["big"]}
	step(&smallMoved, 1700*time.Millisecond+passGap(500)+time.Millisecond, true, "a small changefeed whose routing table changed, at once")
}
