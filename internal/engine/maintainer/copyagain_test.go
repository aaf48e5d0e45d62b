package maintainer

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition whose copy was done copies again (a partition attached to
// its table, docs/postgres.md): the progress heard past the persisted
// checkpoint is the one persisted next, not the older "done" — which a
// capture that crashed in the middle of that copy would resume from,
// skipping the rest of it. A report older than what is persisted still
// leaves the persisted progress.
func TestACopyBegunAgainIsPersistedWithItsPosition(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	st := maintainedOnN2(cf, map[string]meta.RouteRecord{
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 3, Status: model.PartitionActive}},
	})
	now := time.Now()
	at := func(d time.Duration) model.Ts { return model.TsFromTime(now.Add(d)) }
	done := model.CopyProgress{Done: true, Rows: 500, Key: "(id)"}
	st.Progress = map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
		"p1": {Progress: model.Progress{Checkpoint: at(-time.Second), Node: "n1", Epoch: 3, Copy: done}},
	}}
	h := hostOn(st)
	report := func(p model.Progress) {
		t.Helper()
		msg, err := transport.NewMessage("n1", "n2", transport.TopicHeartbeat, transport.Heartbeat{Changefeed: cf, MaintainerEpoch: 1,
			Partitions: []transport.PartitionProgress{{ID: "p1", Progress: p}}})
		if err != nil {
			t.Fatal(err)
		}
		h.onHeartbeat(context.Background(), msg)
	}
	again := model.CopyProgress{Rows: 520, Key: "(id)", Only: "16401"}.CopiedThrough("k")
	report(model.Progress{Checkpoint: at(0), Node: "n1", Epoch: 3, Copy: again})
	if got := h.positions(st, st.Changefeeds[cf])["p1"]; got.Copy != again || got.Checkpoint != at(0) {
		t.Fatalf("a copy begun again after its persisted checkpoint: the position to persist is %+v, want its copy %+v", got, again)
	}
	// An old report (a heartbeat that was late) under a later persisted
	// position keeps that position's progress.
	st.Progress[cf]["p1"] = meta.ProgressRecord{Progress: model.Progress{Checkpoint: at(0), Node: "n1", Epoch: 3, Copy: again}}
	report(model.Progress{Checkpoint: at(-time.Second), Node: "n1", Epoch: 3, Copy: done})
	if got := h.positions(st, st.Changefeeds[cf])["p1"]; got.Copy != again || got.Checkpoint != at(0) {
		t.Fatalf("a late report of an earlier position: the position to persist is %+v, want %+v at %v", got, again, at(0))
	}
}

// A copy begun again is saved in the write that moves the changefeed's
// checkpoint past its beginning, whatever the cadence of the positions.
func TestACopyBegunAgainIsSavedWithTheCheckpoint(t *testing.T) {
	done := model.CopyProgress{Done: true, Rows: 500}
	saved := map[string]meta.ProgressRecord{
		"p1": {Progress: model.Progress{Checkpoint: 10, Node: "n1", Epoch: 3, Copy: done}},
		"p2": {Progress: model.Progress{Checkpoint: 10, Node: "n1", Epoch: 3, Copy: done}},
	}
	heard := model.ProgressTable{
		"p1": {Checkpoint: 20, Node: "n1", Epoch: 3, Copy: done.Including("16401")},
		"p2": {Checkpoint: 20, Node: "n1", Epoch: 3, Copy: done},
	}
	cp, changed, urgent := whatToSave(saved, heard, nil)
	if cp != 20 || !changed || len(urgent) != 1 || urgent[0] != "p1" {
		t.Fatalf("checkpoint %v, changed %v, urgent %v; want 20, true, [p1]", cp, changed, urgent)
	}
	// A relation more to copy after the one under way (or after the
	// table's own first copy) is as urgent; a copy that only went on is
	// not.
	copying := model.CopyProgress{Rows: 5, Only: "16401"}.CopiedThrough("k")
	saved["p1"] = meta.ProgressRecord{Progress: model.Progress{Checkpoint: 20, Node: "n1", Epoch: 3, Copy: copying}}
	saved["p2"] = meta.ProgressRecord{Progress: model.Progress{Checkpoint: 20, Node: "n1", Epoch: 3, Copy: model.CopyProgress{To: "c\x00"}}}
	heard["p1"] = model.Progress{Checkpoint: 30, Node: "n1", Epoch: 3, Copy: copying.Including("16420")}
	heard["p2"] = model.Progress{Checkpoint: 30, Node: "n1", Epoch: 3, Copy: model.CopyProgress{To: "c\x00"}.Including("16420")}
	if _, _, urgent = whatToSave(saved, heard, nil); len(urgent) != 2 {
		t.Fatalf("urgent %v; want p1 and p2", urgent)
	}
	heard["p1"] = model.Progress{Checkpoint: 40, Node: "n1", Epoch: 3, Copy: copying.CopiedThrough("m")}
	heard["p2"] = model.Progress{Checkpoint: 40, Node: "n1", Epoch: 3, Copy: model.CopyProgress{To: "d\x00"}}
	if _, _, urgent = whatToSave(saved, heard, nil); len(urgent) != 0 {
		t.Fatalf("urgent %v; want none", urgent)
	}
}
