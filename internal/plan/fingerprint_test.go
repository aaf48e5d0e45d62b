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
	b, _ := json.Marshal(placementJSON{r.Span, r.Node, r.Status, r.Target, r.SplitKey, r.Pinned})
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
			r := model.RouteEntry{Span: model.Span{Table: "public." + a, Start: a, End: b, Key: odd[(i+j)%len(odd)]},
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
		r := model.RouteEntry{Span: model.Span{Table: table, Start: start, End: end, Key: key}, Node: model.NodeID(node),
			Status: model.PartitionStatus(status), Target: model.NodeID(target), SplitKey: split, Pinned: pinned}
		if got, want := placementDigest(r), jsonDigest(r); got != want {
			t.Fatalf("placement %+v: digest %s, encoding/json's %s", r, got, want)
		}
	})
}
