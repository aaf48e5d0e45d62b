package maintainer

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The heartbeat that brings the initial snapshot's last copy wakes the
// maintainer's pass, which persists the snapshot's end at once (the
// status shows it; a runbook waiting for it goes on); one that brings any
// other copy's end does not, nor does a copy heard again. A partition
// not heard from counts as persisted.
func TestTheLastCopyOfASnapshotWakesThePass(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	route := func(pid string) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf, Node: "n1", Epoch: 1, Status: model.PartitionActive}}
	}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {
			Info:       model.ChangefeedInfo{ID: cf},
			Status:     model.ChangefeedStatus{State: model.ChangefeedNormal},
			Maintainer: model.MaintainerPlacement{Node: "n2", Epoch: 1},
		}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {"p1": route("p1"), "p2": route("p2"), "p3": route("p3")}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
			"p3": {Progress: model.Progress{Checkpoint: 5, Node: "n1", Epoch: 1, Copy: model.CopyProgress{Done: true}}},
		}},
	}
	h := hostOn(st)
	at := model.TsFromTime(time.Now())
	woke := func(p1, p2 bool) bool {
		t.Helper()
		at++
		progress := func(done bool) model.Progress {
			return model.Progress{Checkpoint: at, Epoch: 1, Copy: model.CopyProgress{Done: done, To: "k"}}
		}
		msg, err := transport.NewMessage("n1", "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{{ID: "p1", Progress: progress(p1)}, {ID: "p2", Progress: progress(p2)}}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
		h.mu.Lock()
		urgent := h.heard[cf].urgent
		h.heard[cf].urgent = false
		h.mu.Unlock()
		select {
		case <-h.wake:
		default:
		}
		return urgent
	}
	woke(false, false) // first heard: persisted at once anyway
	if woke(false, false) {
		t.Fatal("positions that only moved woke the pass")
	}
	if woke(true, false) {
		t.Fatal("p1's copy, with p2 still copying, woke the pass")
	}
	if !woke(true, true) {
		t.Fatal("p2's copy, the snapshot's last (p3's is persisted), did not wake the pass")
	}
	if woke(true, true) {
		t.Fatal("the copies heard again woke the pass")
	}
}
