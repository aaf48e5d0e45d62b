package transport

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The compact positions come back as they went, through the heartbeat's
// JSON; the ones that do not fit the form ride as they did, and a
// heartbeat of an agent that sends only Partitions still reads.
func TestCompactPositionsRoundTrip(t *testing.T) {
	parts := []PartitionProgress{
		{ID: "t00001-p1", Progress: model.Progress{Checkpoint: 463_000_000_000_001, Epoch: 3}},
		{ID: "p7", Progress: model.Progress{Checkpoint: 1, Epoch: 1}},
		{ID: "fin", Progress: model.Progress{Checkpoint: 9, Epoch: 2, Final: true, Handover: true}},
		{ID: "copying", Progress: model.Progress{Checkpoint: 9, Epoch: 2, Copy: model.CopyProgress{To: "k\x00", Rows: 5}}},
		{ID: "odd id", Progress: model.Progress{Checkpoint: 4, Epoch: 1}},
	}
	compact, rest := CompactPositions(parts)
	if len(rest) != 3 || compact != "t00001-p1 463000000000001 3\np7 1 1\n" {
		t.Fatalf("compact %q, rest %v", compact, rest)
	}
	body, err := json.Marshal(Heartbeat{Changefeed: "demo", Partitions: rest, Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	var hb Heartbeat
	if err := json.Unmarshal(body, &hb); err != nil {
		t.Fatal(err)
	}
	got, err := hb.Positions()
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]PartitionProgress{}, parts[:2]...), parts[2:]...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("positions\n got %+v\nwant %+v", got, want)
	}
	old := Heartbeat{Partitions: parts}
	if got, err := old.Positions(); err != nil || !reflect.DeepEqual(got, parts) {
		t.Fatalf("a heartbeat without compact positions: %v, %v", got, err)
	}
	for _, bad := range []string{"p1 5\n", "p1 5 1", " 5 1\n", "p1 x 1\n", "p1 5 -1\n"} {
		hb := Heartbeat{Compact: bad}
		if _, err := hb.Positions(); err == nil {
			t.Errorf("compact %q was read", bad)
		}
	}
}

// FuzzHeartbeatPositions: what a peer sends never panics the reader, and
// what CompactPositions writes reads back the same.
func FuzzHeartbeatPositions(f *testing.F) {
	f.Add("p1 5 1\np2 6 2\n", "p3", uint64(7), uint64(1))
	f.Add("p1 5", "", uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, compact, id string, cp, epoch uint64) {
		hb := Heartbeat{Compact: compact}
		_, _ = hb.Positions()
		parts := []PartitionProgress{{ID: id, Progress: model.Progress{Checkpoint: model.Ts(cp), Epoch: epoch}}}
		c, rest := CompactPositions(parts)
		back := Heartbeat{Compact: c, Partitions: rest}
		got, err := back.Positions()
		if err != nil || len(got) != 1 || got[0] != parts[0] {
			t.Fatalf("%+v came back as %+v (%v)", parts[0], got, err)
		}
	})
}
