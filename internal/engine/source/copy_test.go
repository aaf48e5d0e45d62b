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
	r := &CopyReader{seenFrom: 10, seen: []seenRow{{ts: 11, key: "a"}, {ts: 12, key: "b"}, {ts: 12, key: "c"}, {ts: 20, key: "d"}}}
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

// What a chunk gives at its high watermark for the keys the stream
// changed: the columns every change its read may not have seen left out
// (after its low watermark at 10, or racy at 8) — not a column one of
// them gave (b), nothing for a row deleted or inserted meanwhile (c, d),
// or given whole by a transaction the read did not see (g), nothing for
// a change its read saw (e, at 9), and the key's columns besides.
func TestAChunkGivesWhatEveryUnseenChangeLeftOut(t *testing.T) {
	t.Parallel()
	r := &CopyReader{seenFrom: 5, seen: []seenRow{
		{ts: 8, key: "a", left: []string{"body", "note"}},
		{ts: 8, key: "g"},
		{ts: 9, key: "e", left: []string{"body"}},
		{ts: 11, key: "g", left: []string{"body"}},
		{ts: 11, key: "a", left: []string{"body"}},
		{ts: 11, key: "b", left: []string{"body"}},
		{ts: 12, key: "b", left: []string{"note"}},
		{ts: 12, key: "c", left: []string{"body"}},
		{ts: 13, key: "c"},
		{ts: 13, key: "d"},
		{ts: 14, key: "d", left: []string{"body"}},
	}}
	def := &TableDef{Columns: []ColumnDef{{Name: "id", KeyPos: 1}, {Name: "n"}, {Name: "body"}, {Name: "note"}}}
	c := &Chunk{Table: "t", Def: def, open: true, lowAt: 10, dropped: map[string]bool{"a": true, "b": true, "c": true, "d": true, "g": true}}
	want := r.unsent(c, []model.Ts{8})
	if !reflect.DeepEqual(want, map[string][]string{"a": {"body"}}) {
		t.Fatalf("columns to give %v; want a's body", want)
	}
	row := func(k string) Event {
		return Event{Kind: KindDML, Table: "t", Op: OpInsert, Key: k, New: []Value{Text(k), Text("1"), Text(k + "-body"), Null}}
	}
	c.Rows = []Event{row("a"), row("b"), row("c"), row("d"), row("f"), row("g")}
	fills := c.fills(&Event{Kind: KindMark, CommitTs: 15, Def: def}, want)
	if len(fills) != 1 {
		t.Fatalf("%d fills: %+v", len(fills), fills)
	}
	f := fills[0]
	left := Value{Unchanged: true}
	if f.Op != OpUpdate || f.Key != "a" || f.CommitTs != 15 || !reflect.DeepEqual(f.New, []Value{Text("a"), left, Text("a-body"), left}) {
		t.Fatalf("the fill of a: %+v", f)
	}
}

// A relation attached again while the span copies it (detached, written
// while detached, attached) is copied once more after this pass: the rows
// written meanwhile came through no stream and may be keyed before what
// the pass copied. Another relation of the same mark is copied after it,
// as any attached one; the same mark met again copies nothing twice.
func TestARelationAttachedAgainWhileItCopiesIsCopiedOnceMore(t *testing.T) {
	t.Parallel()
	copying := model.CopyProgress{Rows: 40, Key: "(id)", Only: "16401"}.CopiedThrough("k")
	r := &CopyReader{copied: copying}
	attach := &Event{Kind: KindMark, Table: "t", CommitTs: 20, Statement: `{"kind":"attached","id":"16401 16420","table":"t"}`}
	r.onMark(attach)
	got := r.copied
	if got.Only != "16401" || got.To != copying.To || got.Then != "16401 16420" || got.Reattached != 20 || got.Again != 0 || !got.Adds(copying) {
		t.Fatalf("after the relation it copies was attached again: %+v", got)
	}
	r.onMark(attach)
	if r.copied != got {
		t.Fatalf("the same mark met twice: %+v, want %+v", r.copied, got)
	}
	if next := got.Finished(); next.Only != "16401" || next.To != "" || next.Then != "16420" {
		t.Fatalf("the second pass: %+v", next)
	}
	// A column retyped at 15, before the attach's mark at 20, whose own
	// mark (its At the change's position) comes after it: the table is
	// copied again too, not taken for the attach met again.
	r.onMark(&Event{Kind: KindMark, Table: "t", CommitTs: 30, Statement: `{"kind":"again","id":"16384","table":"t","at":15}`})
	if r.copied.Then != "16401 16420 16384" || r.copied.Again != 15 {
		t.Fatalf("a table retyped before a relation it copies was attached again: %+v", r.copied)
	}
	// Done, or copying another relation: attached, it is copied after.
	r = &CopyReader{copied: model.CopyProgress{Done: true, Rows: 40}}
	r.onMark(attach)
	if r.copied.Only != "16401" || r.copied.Then != "16420" || r.copied.Done {
		t.Fatalf("a done copy, a relation attached: %+v", r.copied)
	}
}
