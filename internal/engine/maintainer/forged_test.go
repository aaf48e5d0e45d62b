package maintainer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Issue 14's forged heartbeat: a report that a partition's checkpoint is
// 30 s in the future was kept (the highest heard wins), and a move then
// resumed the partition there, skipping 975 rows. No source produces a
// position beyond the clock: such a report is refused, and the position
// stays where the real reports put it.
func TestAPositionBeyondTheClockIsRefused(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	st := maintainedOnN2(cf, map[string]meta.RouteRecord{
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 3, Status: model.PartitionActive}},
	})
	h := hostOn(st)
	report := func(at time.Time) {
		msg, err := transport.NewMessage("n1", "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{{ID: "p1", Progress: model.Progress{Checkpoint: model.TsFromTime(at), Epoch: 3}}}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
	}
	heard := func() model.Ts {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.heard[cf].parts["p1"].Progress.Checkpoint
	}
	now := time.Now()
	report(now)
	if got := heard(); got != model.TsFromTime(now) {
		t.Fatalf("a real report: heard %v, want %v", got, model.TsFromTime(now))
	}
	report(now.Add(30 * time.Second))
	if got := heard(); got != model.TsFromTime(now) {
		t.Fatalf("a report 30 s ahead of the clock moved the position to %v", got)
	}
	if got := h.positions(st, st.Changefeeds[cf])["p1"].Checkpoint; got != model.TsFromTime(now) {
		t.Fatalf("the position persisted would be %v, want %v", got, model.TsFromTime(now))
	}
	report(now.Add(time.Second)) // within the clocks' disagreement
	if got := heard(); got != model.TsFromTime(now.Add(time.Second)) {
		t.Fatalf("a report 1 s ahead (clock skew) was refused: %v", got)
	}
}

// A database's positions come from its own clock: one whose clock runs
// ahead of the maintainer's by more than the captures' may disagree had
// every position refused, and its changefeed's checkpoint never moved. A
// position the changefeed's reader here has produced is taken; one
// beyond it and the clock is still refused.
func TestAPositionOfADatabaseWhoseClockIsAheadIsTaken(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	st := maintainedOnN2(cf, map[string]meta.RouteRecord{
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 3, Status: model.PartitionActive}},
	})
	h := hostOn(st)
	ahead := time.Now().Add(time.Minute) // the database's clock
	l, err := eventlog.Open(t.TempDir(), model.TsFromTime(ahead.Add(-time.Second)), eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Resolve(model.TsFromTime(ahead))
	h.logs.Put(cf, l)
	report := func(at time.Time) model.Ts {
		msg, err := transport.NewMessage("n1", "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{{ID: "p1", Progress: model.Progress{Checkpoint: model.TsFromTime(at), Epoch: 3}}}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.heard[cf].parts["p1"].Progress.Checkpoint
	}
	if got := report(ahead); got != model.TsFromTime(ahead) {
		t.Fatalf("a position the reader produced, a minute ahead of this clock: heard %v", got)
	}
	if got := report(ahead.Add(30 * time.Second)); got != model.TsFromTime(ahead) {
		t.Fatalf("a position beyond what the reader produced moved the position to %v", got)
	}
}

// hostOn is the maintainer host of node n2 over a fixed state st, with
// nothing running: for tests of what it makes of the messages it hears.
// maintainedOnN2 is a state of changefeed cf, running, its maintainer
// on n2, its partitions routes.
func maintainedOnN2(cf model.ChangefeedID, routes map[string]meta.RouteRecord) *meta.State {
	return &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {
			Info:       model.ChangefeedInfo{ID: cf},
			Status:     model.ChangefeedStatus{State: model.ChangefeedNormal},
			Maintainer: model.MaintainerPlacement{Node: "n2", Epoch: 1},
		}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: routes},
	}
}

func hostOn(st *meta.State) *Host {
	hub := transport.NewHub()
	return NewHost(HostConfig{Self: "n2", View: cluster.Fixed(st), Transport: hub.Join("n2"), Logs: eventlog.NewServer(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// A partition's placement, checked once per routing table for the
// positions its heartbeats bring (heardPart), is checked again when the
// table changes: once the partition moved to another node under a new
// epoch, a late report of its old placement is stale and dropped, as it
// was when every report was looked up; the new placement's is taken.
func TestAPlacementCheckedOnceIsCheckedAgainWhenTheRoutingTableChanges(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	st := maintainedOnN2(cf, map[string]meta.RouteRecord{
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 3, Status: model.PartitionActive}},
	})
	view := cluster.Fixed(st)
	hub := transport.NewHub()
	h := NewHost(HostConfig{Self: "n2", View: view, Transport: hub.Join("n2"), Logs: eventlog.NewServer(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	report := func(from model.NodeID, epoch uint64, at model.Ts) model.Progress {
		t.Helper()
		msg, err := transport.NewMessage(from, "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{{ID: "p1", Progress: model.Progress{Checkpoint: at, Epoch: epoch}}}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.heard[cf].parts["p1"].Progress
	}
	now := model.TsFromTime(time.Now())
	report("n1", 3, now-20)
	if got := report("n1", 3, now-10); got.Checkpoint != now-10 || got.Node != "n1" {
		t.Fatalf("the placement's reports: heard %+v", got)
	}
	moved := maintainedOnN2(cf, map[string]meta.RouteRecord{
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n3", Epoch: 4, Status: model.PartitionActive}},
	})
	view.Set(moved)
	if got := report("n1", 3, now-5); got.Checkpoint != now-10 || got.Node != "n1" {
		t.Fatalf("a report of the placement that moved away: heard %+v, want it dropped", got)
	}
	if got := report("n3", 4, now); got.Checkpoint != now || got.Node != "n3" || got.Epoch != 4 {
		t.Fatalf("the new placement's report: heard %+v", got)
	}
}
