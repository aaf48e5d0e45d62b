package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition being moved away that nothing runs here is handed over at
// the position its run stopped at only when that stop was clean. A stop
// that had to be aborted (its sink too slow to stop within the bound)
// knows only its checkpoint, and batches of it may still land after the
// next owner's writes of the same keys: it was handed over all the same,
// exactly there, as if it had stopped cleanly.
func TestOnlyACleanStopIsHandedOverWhereItStopped(t *testing.T) {
	route := func(pid string) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf, Node: "n1", Target: "n3", Epoch: 2, Status: model.PartitionDraining, Span: model.Span{Table: "t0001"}}}
	}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {
			Info:       model.ChangefeedInfo{ID: cf, SourceURI: "gen://?tables=1&keys=10&rate=10", SinkURI: "blackhole://"},
			Status:     model.ChangefeedStatus{State: model.ChangefeedNormal},
			Maintainer: model.MaintainerPlacement{Node: "n2", Epoch: 1},
		}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {"clean": route("clean"), "aborted": route("aborted")}},
	}
	m := NewManager(ManagerConfig{Self: "n1", View: cluster.Fixed(st), Transport: transport.NewHub().Join("n1"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer m.stopAll()
	m.mu.Lock()
	m.finals[finalKey(route("clean").Route)] = &final{cf: cf, pid: "clean", p: model.Progress{Checkpoint: 100, Node: "n1", Epoch: 2, Final: true}}
	m.finals[finalKey(route("aborted").Route)] = &final{cf: cf, pid: "aborted", p: model.Progress{Checkpoint: 100, Node: "n1", Epoch: 2}}
	m.mu.Unlock()

	m.reconcile(context.Background(), st)
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.finals[finalKey(route("clean").Route)].p; !p.Final || !p.Handover || p.Checkpoint != 100 {
		t.Fatalf("the clean stop: %+v, want handed over at 100", p)
	}
	if p := m.finals[finalKey(route("aborted").Route)].p; p.Final || p.Handover {
		t.Fatalf("the aborted stop: %+v, want neither final nor handed over", p)
	}
}
