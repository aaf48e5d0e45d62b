package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition moved here holds its changefeed's checkpoint at the
// hand-over until its maintainer hears a position past it: the node
// reports that position at once, to that changefeed's maintainer alone,
// not at the next heartbeat (up to half a second later, during a drain
// part of every move's pause). Not before the partition has run past
// its hand-over, and not again once a heartbeat reported it.
func TestAPartitionMovedHereReportsItsFirstPositionPastTheHandOverAtOnce(t *testing.T) {
	st, m, hub := managerOfFeeds("a", "b")
	var mu sync.Mutex
	heard := map[string]model.Ts{}
	hub.Join("n2").Handle(transport.TopicHeartbeat, func(_ context.Context, msg transport.Message) {
		var hb transport.Heartbeat
		if msg.Decode(&hb) != nil {
			return
		}
		pos, err := hb.Positions()
		if err != nil {
			return
		}
		mu.Lock()
		for _, p := range pos {
			heard[string(hb.Changefeed)+"/"+p.ID] = p.Progress.Checkpoint
		}
		mu.Unlock()
	})
	handOver := model.Ts(1000 << 18)
	moved := &Dispatcher{checkpoint: handOver}
	other := &Dispatcher{checkpoint: handOver + 5}
	m.running = map[string]*managed{
		key("a", "p1"): {route: meta.RouteRecord{Route: model.RouteEntry{ID: "p1", Changefeed: "a", Node: "n1", Epoch: 2, Start: handOver}}, d: moved},
		key("b", "q1"): {route: meta.RouteRecord{Route: model.RouteEntry{ID: "q1", Changefeed: "b", Node: "n1", Epoch: 1}}, d: other},
	}
	m.mu.Lock()
	m.watchHandInLocked(key("a", "p1"), "a", handOver)
	m.mu.Unlock()

	if m.handInsPending() == nil {
		t.Fatal("a partition moved here is not watched")
	}
	if past := m.handInsPast(); past != nil {
		t.Fatalf("an early heartbeat for %v while the moved partition is still at its hand-over", past)
	}
	moved.mu.Lock()
	moved.checkpoint = handOver + 7
	moved.mu.Unlock()
	past := m.handInsPast()
	if len(past) != 1 || !past["a"] {
		t.Fatalf("the early heartbeat is for %v, want changefeed a (its partition ran past the hand-over)", past)
	}
	m.beat(context.Background(), st, past)
	mu.Lock()
	got := map[string]model.Ts{}
	for k, v := range heard {
		got[k] = v
	}
	mu.Unlock()
	if len(got) != 1 || got["a/p1"] != handOver+7 {
		t.Fatalf("the maintainer heard %v, want a/p1 at %d alone", got, handOver+7)
	}
	if m.handInsPending() != nil || m.handInsPast() != nil {
		t.Fatal("the partition is still watched after its early heartbeat")
	}

	// Reported by a regular heartbeat first: no early one after it.
	m.lastHandIn = time.Time{}
	m.mu.Lock()
	m.watchHandInLocked(key("a", "p1"), "a", handOver+7)
	m.mu.Unlock()
	moved.mu.Lock()
	moved.checkpoint = handOver + 9
	moved.mu.Unlock()
	m.heartbeat(context.Background(), st)
	if past := m.handInsPast(); past != nil {
		t.Fatalf("an early heartbeat for %v after a regular one reported the partition past its hand-over", past)
	}
	// Watched no longer than handInWait.
	m.mu.Lock()
	m.handIns[key("a", "p1")] = handIn{cf: "a", from: handOver + 100, since: time.Now().Add(-handInWait)}
	m.mu.Unlock()
	if past := m.handInsPast(); past != nil || m.handInsPending() != nil {
		t.Fatalf("a partition watched past handInWait: early heartbeat %v", past)
	}
}
