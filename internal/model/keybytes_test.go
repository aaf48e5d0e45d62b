package model

import (
	"encoding/json"
	"testing"
)

// A partition of a table keyed by bytes is stored as JSON (its routing
// entry and its copy progress in etcd): its bounds and the last key it
// copied come back as they were, through the fast decoders and
// encoding/json alike. Its raw bytes would not: encoding/json writes
// U+FFFD for bytes that are not UTF-8.
func TestABytesKeyedPartitionIsStoredAsItIs(t *testing.T) {
	enc := func(raw string) string {
		k, err := EncodeKeyValues(BytesKeyType, []string{raw})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	span := Span{Table: "shop.tokens", Start: enc("\x8f\x00\x1f\xff"), End: enc("\xc0\x80<&>"), Key: BytesKeyType}
	copied := CopyProgress{Rows: 7}.CopiedThrough(enc("\x90\x00\x00\x7f\x80"))
	route := RouteEntry{ID: "p2", Changefeed: "cf", Span: span, Node: "capture-1", Status: PartitionActive, Epoch: 1, StartCopy: copied}
	b, err := json.Marshal(route)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRouteEntry(b)
	if err != nil || got.Span != span || got.StartCopy != copied {
		t.Fatalf("stored %s, read back %+v (%v); want %+v", b, got, err, route)
	}
	var std RouteEntry
	if err := json.Unmarshal(b, &std); err != nil || std.Span != span {
		t.Fatalf("encoding/json read back %+v (%v)", std.Span, err)
	}
	b, err = json.Marshal(ProgressTable{"p2": {Checkpoint: 9, Node: "capture-1", Epoch: 1, Copy: copied}})
	if err != nil {
		t.Fatal(err)
	}
	es, err := DecodeProgressEntries(b)
	if err != nil || len(es) != 1 || es[0].Progress.Copy != copied {
		t.Fatalf("stored %s, read back %+v (%v)", b, es, err)
	}
	if lo, hi := span.Bounds(); lo != "0x8F001FFF" || hi != "0xC0803C263E" {
		t.Fatalf("the bounds show as %q and %q", lo, hi)
	}

	raw := Span{Table: "shop.tokens", Start: "\x8f\x00", Key: BytesKeyType}
	b, _ = json.Marshal(raw)
	if back, _ := DecodeRouteEntry([]byte(`{"id":"p","changefeed":"cf","span":` + string(b) + `,"status":"Active","epoch":1}`)); back.Span == raw {
		t.Fatal("raw bytes came back through JSON: the encoding would not be needed")
	}
}
