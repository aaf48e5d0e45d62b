package postgres

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

func TestASnapshotHidesWhatRanAndWhatCameAfter(t *testing.T) {
	t.Parallel()
	snap, err := parseSnapshot("100:105:101,103")
	if err != nil {
		t.Fatal(err)
	}
	for xid, hidden := range map[uint32]bool{99: false, 100: false, 101: true, 102: false, 103: true, 104: false, 105: true, 4000: true} {
		if snap.hides(xid) != hidden {
			t.Errorf("xid %d: hidden %v, want %v", xid, !hidden, hidden)
		}
	}
	// Past the 32-bit wrap: epoch 1's xid 10 is 2^32+10; the stream says 10.
	wrapped, err := parseSnapshot("4294967290:4294967306:4294967300")
	if err != nil {
		t.Fatal(err)
	}
	if !wrapped.hides(4) || wrapped.hides(9) || !wrapped.hides(10) || wrapped.hides(4294967295) {
		t.Errorf("around the wrap: 4 %v, 9 %v, 10 %v, 4294967295 %v", wrapped.hides(4), wrapped.hides(9), wrapped.hides(10), wrapped.hides(4294967295))
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The puller lists, at a high watermark, the positions of transactions
// before its low watermark that its read's snapshot did not see, and
// says so when it cannot tell.
func TestTheHighWatermarkNamesWhatTheReadMissed(t *testing.T) {
	t.Parallel()
	o := newCommitOrder()
	row := []source.Event{{Kind: source.KindDML}}
	markOf := func(mk source.Mark) [][]byte {
		b, _ := json.Marshal(mk)
		return [][]byte{b}
	}
	o.pass(&Txn{Ts: 10, Xid: 500, Events: row})                                       // seen by the read
	o.pass(&Txn{Ts: 11, Xid: 502, Events: row})                                       // committed, not yet visible
	o.pass(&Txn{Ts: 12, Xid: 503, Marks: markOf(source.Mark{Kind: "low", ID: "c1"})}) // the low watermark
	o.pass(&Txn{Ts: 13, Xid: 504, Events: row})                                       // in the window: dropped anyway
	high, missed := o.pass(&Txn{Ts: 14, Xid: 505, Marks: markOf(source.Mark{Kind: "high", ID: "c1", Snap: "501:505:502,504"})})
	var got source.Mark
	if err := json.Unmarshal(high[0], &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Racy, []model.Ts{11}) || got.Unsure || missed != 1 {
		t.Fatalf("racy %v unsure %v, want [11] false", got.Racy, got.Unsure)
	}
	// A high watermark whose low one the puller never saw (it restarted).
	got = source.Mark{}
	high, _ = o.pass(&Txn{Ts: 15, Xid: 506, Marks: markOf(source.Mark{Kind: "high", ID: "c2", Snap: "501:505:"})})
	if err := json.Unmarshal(high[0], &got); err != nil || !got.Unsure {
		t.Fatalf("an unknown low watermark: %+v %v", got, err)
	}
	// A table without a key is read under a lock: no snapshot, no verdict.
	o.pass(&Txn{Ts: 16, Marks: markOf(source.Mark{Kind: "low", ID: "k"})})
	got = source.Mark{}
	high, _ = o.pass(&Txn{Ts: 17, Marks: markOf(source.Mark{Kind: "high", ID: "k"})})
	if err := json.Unmarshal(high[0], &got); err != nil || got.Unsure || got.Racy != nil {
		t.Fatalf("a keyless chunk: %+v %v", got, err)
	}
}
