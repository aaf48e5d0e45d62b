package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A dispatcher says once that its copy is durable, at the ack that makes
// it so; the node reports its last copy of a changefeed at once, not at
// the next heartbeat (up to half a second later: a third of a 1,000,000-row
// MySQL snapshot's time until its end showed), to that changefeed's
// maintainer alone, and does not for a changefeed still copying here.
func TestTheLastCopyOnANodeIsReportedAtOnce(t *testing.T) {
	calls := 0
	d := &Dispatcher{cfg: Config{OnCopied: func() { calls++ }}, acked: make(chan struct{}, 1)}
	copying := &inflightBatch{end: 10, copied: model.CopyProgress{To: "k5"}}
	done := &inflightBatch{end: 20, copied: model.CopyProgress{Done: true}}
	after := &inflightBatch{end: 30, copied: model.CopyProgress{Done: true}}
	d.inflight = []*inflightBatch{copying, done, after}
	d.ack(copying, nil)
	if calls != 0 {
		t.Fatalf("OnCopied called %d times before the copy is durable", calls)
	}
	d.ack(done, nil)
	d.ack(after, nil)
	if calls != 1 {
		t.Fatalf("OnCopied called %d times, want once, at the ack that made the copy durable", calls)
	}

	// Changefeeds a (p1 copied, p2 copying) and b (q1, its only
	// partition here), both maintained on n2.
	st, m, hub := managerOfFeeds("a", "b")
	var mu sync.Mutex
	var heard []string
	hub.Join("n2").Handle(transport.TopicHeartbeat, func(_ context.Context, msg transport.Message) {
		var hb transport.Heartbeat
		if msg.Decode(&hb) == nil {
			mu.Lock()
			heard = append(heard, string(hb.Changefeed))
			mu.Unlock()
		}
	})
	running := func(pid string, cf model.ChangefeedID, copied bool) *managed {
		return &managed{route: meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf, Node: "n1", Epoch: 1}},
			d: &Dispatcher{copied: model.CopyProgress{Done: copied}}}
	}
	m.running = map[string]*managed{
		key("a", "p1"): running("p1", "a", true), key("a", "p2"): running("p2", "a", false),
		key("b", "q1"): running("q1", "b", true),
	}
	if m.copiesPending() != nil || m.copiesEndedHere() != nil {
		t.Fatal("an early heartbeat with no copy ended")
	}
	m.copied("a") // p1: p2 still copies here
	if len(m.wake) != 1 {
		t.Fatal("a copy's end did not wake the manager's loop")
	}
	if ended := m.copiesEndedHere(); ended != nil {
		t.Fatalf("an early heartbeat for %v while p2 still copies changefeed a here", ended)
	}
	m.lastEarly = time.Time{}
	m.copied("b") // q1, the only partition of b here
	ended := m.copiesEndedHere()
	if len(ended) != 1 || !ended["b"] {
		t.Fatalf("the early heartbeat is for %v, want changefeed b's last copy here", ended)
	}
	m.beat(context.Background(), st, ended)
	mu.Lock()
	got := append([]string(nil), heard...)
	mu.Unlock()
	sort.Strings(got)
	if len(got) != 1 || got[0] != "b" {
		t.Fatalf("the early heartbeat went to %v, want b's maintainer alone", got)
	}

	// Within earlyBeatGap of the last early one it waits, and is not
	// forgotten.
	m.copied("b")
	if ended := m.copiesEndedHere(); ended != nil {
		t.Fatalf("an early heartbeat for %v right after another", ended)
	}
	select {
	case <-m.copiesPending():
	case <-time.After(10 * time.Second):
		t.Fatal("the pending end never fired")
	}
	if ended := m.copiesEndedHere(); !ended["b"] {
		t.Fatal("the end that waited out the gap was forgotten")
	}
}

// managerOfFeeds is a manager on n1, its view a state of the changefeeds
// ids all maintained on n2, and their hub: n2 joins it to listen.
func managerOfFeeds(ids ...model.ChangefeedID) (*meta.State, *Manager, *transport.Hub) {
	st := &meta.State{Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{}}
	for _, id := range ids {
		st.Changefeeds[id] = &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: id}, Maintainer: model.MaintainerPlacement{Node: "n2", Epoch: 1}, MaintainerRevision: 3}
	}
	hub := transport.NewHub()
	m := NewManager(ManagerConfig{Self: "n1", View: cluster.Fixed(st), Transport: hub.Join("n1"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return st, m, hub
}
