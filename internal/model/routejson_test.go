package model

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// routeEntries are routing entries as maintainers store them: placed,
// unplaced, being moved (a target, a split key, a busy time), handed over
// with a copy under way, joined later, pinned, with a full history.
func routeEntries() []RouteEntry {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	return []RouteEntry{
		{ID: "p1", Changefeed: "cf", Span: Span{Table: "t0001", Start: "", End: "m"}, Node: "capture-1", Status: PartitionActive, Epoch: 3},
		{ID: "p2", Changefeed: "cf", Span: Span{Table: "public.orders", Start: "0000000000000010", End: "", Key: "int8", KeyColumns: "(id)"}, Status: PartitionActive},
		{ID: "p3", Changefeed: "cf-2", Span: Span{Table: `s"q`, Start: "a\x00", End: "ü"}, Node: "capture-2", Status: PartitionDraining, Epoch: 18446744073709551615,
			Target: "capture-3", Start: 465123456789012345, StartCopy: CopyProgress{To: "k\x00", Rows: 42}, Since: 7, SplitKey: "m",
			BusySince: at, Pinned: true,
			History: []PartitionEvent{
				{Time: at, Kind: "moved", From: "capture-1", To: "capture-2", Graceful: true, Busy: 1500 * time.Millisecond},
				{Time: at.Add(time.Hour).In(time.FixedZone("x", 3600)), Kind: "recovered", Epoch: 2, Detail: "sink: \"broken\"\n"},
				{Time: time.Time{}, Kind: "placed", Busy: -5},
			}},
		{ID: "p4", Changefeed: "cf", Span: Span{Table: "t", Start: "a", End: "b"}, Status: PartitionActive, Epoch: 1, StartCopy: CopyProgress{Done: true}},
	}
}

func TestRouteEntriesDecodeAsEncodingJSONDoes(t *testing.T) {
	for _, want := range routeEntries() {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var std RouteEntry
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatal(err)
		}
		got, ok := decodeRouteFast(b)
		if !ok {
			t.Errorf("%s: the fast path gave up on what json.Marshal writes", b)
			continue
		}
		if !reflect.DeepEqual(got, std) {
			t.Errorf("%s:\ndecoded       %+v\nencoding/json %+v", b, got, std)
		}
	}
	// Any other form of valid JSON is still read, by encoding/json.
	for _, b := range []string{
		`{"changefeed":"cf","id":"p1","span":{"table":"t","start":"","end":""},"status":"Active","epoch":1}`,
		`{ "id": "p1", "changefeed": "cf", "span": {"table": "t", "start": "", "end": ""}, "status": "Active", "epoch": 1 }`,
		`{"id":"p1","changefeed":"cf","span":{"table":"t","start":"","end":""},"status":"Active","epoch":1,"history":[]}`,
	} {
		var want RouteEntry
		if err := json.Unmarshal([]byte(b), &want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRouteEntry([]byte(b))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v (%v), want %+v", b, got, err, want)
		}
	}
	if _, err := DecodeRouteEntry([]byte(`{"id":"p1","epoch":-1}`)); err == nil {
		t.Error("a negative epoch decoded without an error")
	}
}

// FuzzDecodeRouteEntry: whatever the fast path accepts, encoding/json
// accepts and decodes to the same entry.
func FuzzDecodeRouteEntry(f *testing.F) {
	for _, r := range routeEntries() {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeRouteFast(b)
		if !ok {
			return
		}
		var want RouteEntry
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%q: the fast path decoded what encoding/json refuses (%v)", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ndecoded       %+v\nencoding/json %+v", b, got, want)
		}
	})
}

// BenchmarkDecodeRouteEntry decodes routing entries as a drain writes
// them (one being moved, one placed after the move with its history)
// with DecodeRouteEntry, against json.Unmarshal of the same bytes in the
// same run, and reports their ratio.
//
//	go test -run '^$' -bench DecodeRouteEntry ./internal/model
func BenchmarkDecodeRouteEntry(b *testing.B) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	moving := RouteEntry{ID: "p1234", Changefeed: "scale-017", Span: Span{Table: "t0012", Start: "k250", End: "k500"}, Node: "capture-2",
		Status: PartitionDraining, Epoch: 4, Target: "capture-3", BusySince: at}
	placed := moving
	placed.Node, placed.Status, placed.Epoch, placed.Target, placed.Start, placed.BusySince = "capture-3", PartitionActive, 5, "", 465123456789012345, time.Time{}
	placed.History = []PartitionEvent{{Time: at, Kind: "moved", From: "capture-2", To: "capture-3", Graceful: true, Busy: 850 * time.Millisecond}}
	for _, c := range []struct {
		name string
		r    RouteEntry
	}{{"moving", moving}, {"placed", placed}} {
		raw, _ := json.Marshal(c.r)
		b.Run(c.name, func(b *testing.B) {
			againstJSON(b, "entry", func() error {
				_, err := DecodeRouteEntry(raw)
				return err
			}, func() error {
				var r RouteEntry
				return json.Unmarshal(raw, &r)
			})
		})
	}
}
