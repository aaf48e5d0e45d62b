package maintainer

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// What a pass writes at once, however recently the record was written:
// the positions it must (a partition about to be placed again), final
// positions, placements heard from for the first time, and the copies
// that end the changefeed's snapshot — not a copy done while others
// still copy (with many tables they end many a second), not a checkpoint
// that only moved.
func TestOnlyTheCopyThatEndsTheSnapshotIsSavedAtOnce(t *testing.T) {
	copying := model.CopyProgress{Rows: 10, To: "m"}
	done := model.CopyProgress{Rows: 20, Done: true}
	saved := map[string]meta.ProgressRecord{
		"a": {Progress: model.Progress{Checkpoint: 100, Node: "n1", Epoch: 1, Copy: done}},
		"b": {Progress: model.Progress{Checkpoint: 100, Node: "n1", Epoch: 1, Copy: copying}},
		"c": {Progress: model.Progress{Checkpoint: 100, Node: "n1", Epoch: 1, Copy: copying}},
	}
	heard := model.ProgressTable{
		"a": {Checkpoint: 150, Node: "n1", Epoch: 1, Copy: done}, // moved on
		"b": {Checkpoint: 120, Node: "n1", Epoch: 1, Copy: done}, // copied; c still copies
		"c": {Checkpoint: 130, Node: "n1", Epoch: 1, Copy: copying},
	}
	check := func(what string, pos model.ProgressTable, must []string, wantCp model.Ts, want []string) {
		t.Helper()
		cp, changed, urgent := whatToSave(saved, pos, must)
		slices.Sort(urgent)
		if cp != wantCp || !changed || !reflect.DeepEqual(urgent, want) {
			t.Fatalf("%s: checkpoint %v, changed %v, at once %v; want %v, true, %v", what, cp, changed, urgent, wantCp, want)
		}
	}
	check("a copy done while another copies", heard, nil, 120, nil)
	check("the same, with a partition to be placed again", heard, []string{"c"}, 120, []string{"c"})

	heard["c"] = model.Progress{Checkpoint: 140, Node: "n1", Epoch: 1, Copy: done}
	check("the last copies done", heard, nil, 120, []string{"b", "c"})

	saved["b"], saved["c"] = meta.ProgressRecord{Progress: heard["b"]}, meta.ProgressRecord{Progress: heard["c"]}
	heard["a"] = model.Progress{Checkpoint: 160, Node: "n1", Epoch: 1, Copy: done, Final: true}
	heard["b"] = model.Progress{Checkpoint: 125, Node: "n2", Epoch: 2, Copy: done}
	check("a final position and a new placement", heard, nil, 125, []string{"a", "b"})

	saved["a"], saved["b"] = meta.ProgressRecord{Progress: heard["a"]}, meta.ProgressRecord{Progress: heard["b"]}
	if _, changed, urgent := whatToSave(saved, heard, nil); changed || len(urgent) > 0 {
		t.Fatalf("nothing new: changed %v, at once %v", changed, urgent)
	}
}
