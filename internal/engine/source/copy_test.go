package source

import (
	"context"
	"fmt"
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

// A read of a copying partition ends at each watermark of its table, and
// most are other partitions' chunks'. One Read goes on past them to the
// rows after: returning nothing at each made the dispatcher back off
// (20 ms doubling to 160 ms) once per watermark, and with four
// partitions copying one table each chunk waited about 0.6 s for its own
// high watermark behind the others' (the MySQL snapshot benchmark, end to
// end, went from 133,000 to 311,000 rows/s with this).
func TestAReadGoesOnPastOtherPartitionsWatermarks(t *testing.T) {
	t.Parallel()
	mark := func(ts model.Ts, kind, id string) func(Cursor) ([]Event, Cursor, error) {
		return func(Cursor) ([]Event, Cursor, error) {
			stmt := fmt.Sprintf(`{"kind":%q,"id":%q,"table":"t"}`, kind, id)
			return []Event{{Kind: KindMark, Table: "t", CommitTs: ts, Statement: stmt}}, Cursor{Done: ts}, nil
		}
	}
	row := Event{Kind: KindDML, Table: "t", Key: "k", CommitTs: 15}
	log := &scriptedLog{answers: []func(Cursor) ([]Event, Cursor, error){
		mark(11, "low", "other-1"), mark(12, "high", "other-1"), mark(13, "low", "other-2"), mark(14, "high", "other-2"),
		func(Cursor) ([]Event, Cursor, error) { return []Event{row}, Cursor{Done: 15}, nil },
	}}
	s := NewLogSource(Env{Changefeed: "cf", Logs: log}, []string{"t"}, 0)
	r := s.NewCopyReader(model.Span{Table: "t"}, 10, model.CopyProgress{Done: true}, CopyOptions{})
	defer r.Close()
	evs, err := r.Read(context.Background(), 100, 10)
	if err != nil || len(evs) != 1 || evs[0].Key != "k" {
		t.Fatalf("one read returned %v, %v; want the row after four watermarks of other partitions", evs, err)
	}
	if len(log.froms) != 5 || r.Position() != 15 {
		t.Fatalf("%d reads of the log, position %v; want 5 and 15", len(log.froms), r.Position())
	}
}
