package source

import (
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The partition drops from a chunk the keys its span had at the
// positions the puller named, and refuses a position it no longer
// remembers.
func TestAChunkDropsTheKeysOfWhatItsReadMissed(t *testing.T) {
	t.Parallel()
	r := &CopyReader{seenFrom: 10, seen: []seenRow{{11, "a"}, {12, "b"}, {12, "c"}, {20, "d"}}}
	c := &Chunk{dropped: map[string]bool{}}
	if !r.dropUnseen(c, []model.Ts{12}) {
		t.Fatal("a remembered position refused")
	}
	if !reflect.DeepEqual(c.dropped, map[string]bool{"b": true, "c": true}) {
		t.Fatalf("dropped %v", c.dropped)
	}
	if r.dropUnseen(&Chunk{dropped: map[string]bool{}}, []model.Ts{9}) {
		t.Fatal("a position before what the reader remembers was accepted")
	}
	// Rows no chunk in flight needs are forgotten.
	r.chunks = []*Chunk{{regAt: 15}, {regAt: 19}}
	r.dropUnseen(&Chunk{dropped: map[string]bool{}}, nil)
	if r.seenFrom != 15 || len(r.seen) != 1 || r.seen[0].key != "d" {
		t.Fatalf("after trimming: from %v, %v", r.seenFrom, r.seen)
	}
}
