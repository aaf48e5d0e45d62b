package plan

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// jsonDigest is placementDigest as it was first written, through
// encoding/json: plans saved then carry digests made this way, and a
// newer coordinator checking them must make the same.
func jsonDigest(r model.RouteEntry) string {
	sp := r.Span
	sp.KeyColumns = "" // not digested (placementDigest)
	b, _ := json.Marshal(placementJSON{sp, r.Node, r.Status, r.Target, r.SplitKey, r.Pinned})
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// The digest written without reflection is encoding/json's, byte for
// byte, for the keys a database's encoded spans and odd names hold.
func TestThePlacementDigestIsTheOneSavedPlansCarry(t *testing.T) {
	odd := []string{"", "k000123", "a\"b", `back\slash`, "<&>", "tab\there", "nl\n", "\x00\x01\x1f", "\x7f",
		"é", "日本", "\xff\xfe", "bad\xc3", "\u2028\u2029", "\U0001F600", "a,b,c", "∞"}
	for i, a := range odd {
		for j, b := range odd {
			r := model.RouteEntry{Span: model.Span{Table: "public." + a, Start: a, End: b, Key: odd[(i+j)%len(odd)], KeyColumns: odd[(2*i+j)%len(odd)]},
				Node: model.NodeID("capture-" + b), Status: model.PartitionDraining, Target: model.NodeID(a), SplitKey: b, Pinned: i%2 == 0}
			if got, want := placementDigest(r), jsonDigest(r); got != want {
				t.Fatalf("placement %+v: digest %s, encoding/json's %s", r, got, want)
			}
		}
	}
}

func FuzzPlacementDigest(f *testing.F) {
	f.Add("public.t", "k1", "k2", "int8", "capture-1", "Active", "", "", false)
	f.Add("t\xff", "<", "\u2028", "", "n\"", "Draining", "x&y", "\\", true)
	f.Fuzz(func(t *testing.T, table, start, end, key, node, status, target, split string, pinned bool) {
		r := model.RouteEntry{Span: model.Span{Table: table, Start: start, End: end, Key: key, KeyColumns: key + end}, Node: model.NodeID(node),
			Status: model.PartitionStatus(status), Target: model.NodeID(target), SplitKey: split, Pinned: pinned}
		if got, want := placementDigest(r), jsonDigest(r); got != want {
			t.Fatalf("placement %+v: digest %s, encoding/json's %s", r, got, want)
		}
	})
}

// The per-changefeed digest covers what the placement digest covers (the
// two encodings list the same fields), and the partition's id: a change
// of any of them changes both.
func TestBothDigestsCoverTheSameFields(t *testing.T) {
	base := model.RouteEntry{ID: "p1", Changefeed: "a", Span: model.Span{Table: "t", Start: "a", End: "b", Key: "int8", KeyColumns: "(id)"},
		Node: "capture-1", Status: model.PartitionActive, Target: "capture-2", SplitKey: "m"}
	for name, edit := range map[string]func(*model.RouteEntry){
		"table": func(r *model.RouteEntry) { r.Span.Table = "u" }, "start": func(r *model.RouteEntry) { r.Span.Start = "0" },
		"end": func(r *model.RouteEntry) { r.Span.End = "c" }, "key": func(r *model.RouteEntry) { r.Span.Key = "" },
		"node": func(r *model.RouteEntry) { r.Node = "capture-3" }, "status": func(r *model.RouteEntry) { r.Status = model.PartitionDraining },
		"target": func(r *model.RouteEntry) { r.Target = "" }, "split": func(r *model.RouteEntry) { r.SplitKey = "" },
		"pinned": func(r *model.RouteEntry) { r.Pinned = true },
	} {
		r := base
		edit(&r)
		if placementDigest(r) == placementDigest(base) || string(appendPartition(nil, r)) == string(appendPartition(nil, base)) {
			t.Errorf("a change of the %s is not in both digests", name)
		}
	}
	r := base
	r.ID, r.Epoch = "p2", 7
	if string(appendPartition(nil, r)) == string(appendPartition(nil, base)) {
		t.Error("a partition's id is not in the per-changefeed digest")
	}
}

// A partition's key columns are in neither digest: a plan computed by a
// cdcctl of a version without them (or by this one, checked by such an
// agent) would otherwise be stale for every partition that has them.
// The per-changefeed digest was computed by the version before
// Span.KeyColumns.
func TestKeyColumnsAreInNeitherDigest(t *testing.T) {
	s := &model.Snapshot{Partitions: []model.PartitionState{
		{Route: model.RouteEntry{ID: "p1", Changefeed: "pg", Span: model.Span{Table: "public.t", End: "m", Key: "int8"}, Node: "capture-1", Status: model.PartitionActive}},
		{Route: model.RouteEntry{ID: "p2", Changefeed: "pg", Span: model.Span{Table: "public.t", Start: "m", Key: "int8"}, Node: "capture-2", Status: model.PartitionActive, Pinned: true}},
	}}
	before := placementDigest(s.Partitions[0].Route)
	for _, cols := range []string{"", "(id)"} {
		s.Partitions[0].Route.Span.KeyColumns = cols
		if got := partitionsDigests(s)["pg"].Digest; got != "2:18c88c7ea5a3b981" {
			t.Fatalf("key columns %q: digest %s, an earlier version's 2:18c88c7ea5a3b981", cols, got)
		}
		if got := placementDigest(s.Partitions[0].Route); got != before {
			t.Fatalf("key columns %q: placement digest %s, without them %s", cols, got, before)
		}
	}
}
