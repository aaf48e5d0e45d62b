package dispatcher

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition starts from the highest position it is known to have
// written up to, with the snapshot's copy progress that goes with that
// position: a graceful hand-over's (which comes with the placement, and
// may be ahead of the persisted progress: the maintainer places the
// partition before it writes the progress), the persisted one once it has
// caught up, or this node's own final position.
func TestAPartitionResumesWithTheCopyProgressOfItsStartPosition(t *testing.T) {
	cf := model.ChangefeedID("pg")
	m := &Manager{finals: map[string]*final{}, finalsOf: map[string]map[string]*final{}}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {Info: model.ChangefeedInfo{ID: cf, StartTs: 100}}},
		Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{cf: {
			"p1": {Progress: model.Progress{Checkpoint: 200, Epoch: 1, Copy: model.CopyProgress{To: "c\x00", Rows: 20}}},
		}},
	}
	r := model.RouteEntry{ID: "p1", Changefeed: cf, Epoch: 2, Start: 300, StartCopy: model.CopyProgress{To: "k\x00", Rows: 50}}
	check := func(what string, at model.Ts, to string, done bool) {
		t.Helper()
		from, copied := m.resumeFrom(st, r)
		if from != at || copied.To != to || copied.Done != done {
			t.Fatalf("%s: starts at %v with %+v, want %v, to %q, done %v", what, from, copied, at, to, done)
		}
	}
	check("handed over, the progress not persisted yet", 300, "k\x00", false)

	st.Progress[cf] = map[string]meta.ProgressRecord{"p1": {Progress: model.Progress{Checkpoint: 400, Epoch: 2, Copy: model.CopyProgress{To: "m\x00"}}}}
	check("the persisted progress ahead of the hand-over", 400, "m\x00", false)

	m.putFinalLocked("pg/p1@2", &final{cf: cf, pid: "p1", p: model.Progress{Checkpoint: 400, Epoch: 2, Final: true, Copy: model.CopyProgress{Done: true}}})
	check("stopped here at that position with more copied", 400, "", true)

	r.Start, r.StartCopy = 0, model.CopyProgress{}
	st.Progress[cf] = nil
	m.dropFinalLocked("pg/p1@2")
	check("nothing known: the changefeed's start, nothing copied", 100, "", false)

	// Persisted below the changefeed's checkpoint (persisted less often):
	// from the checkpoint, where the event log is trimmed, with the copy
	// progress persisted.
	st.Progress[cf] = map[string]meta.ProgressRecord{"p1": {Progress: model.Progress{Checkpoint: 100, Epoch: 2, Copy: model.CopyProgress{Done: true}}}}
	st.Changefeeds[cf].Status.CheckpointTs = 150
	check("persisted below the changefeed's checkpoint", 150, "", true)
}
