package source

import (
	"context"
	"errors"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// scriptedLog answers reads from a list: each an error, or events and the
// cursor after them.
type scriptedLog struct {
	answers []func(from Cursor) ([]Event, Cursor, error)
	froms   []Cursor
}

func (l *scriptedLog) Read(_ context.Context, _ model.ChangefeedID, _ model.Span, from Cursor, _ model.Ts, _ int) ([]Event, Cursor, error) {
	l.froms = append(l.froms, from)
	a := l.answers[0]
	l.answers = l.answers[1:]
	return a(from)
}

func (l *scriptedLog) DDLs(context.Context, model.ChangefeedID, string, model.Ts, model.Ts) ([]Event, error) {
	return nil, nil
}

// A failed read returns its error and keeps the position, so the next
// read asks from the same cursor; a plain reader leaves the snapshot's
// watermarks out, a marked one keeps them.
func TestALogSpanReaderKeepsItsPositionOverAFailedRead(t *testing.T) {
	rows := []Event{{Kind: KindDML, Table: "t", Key: "a", CommitTs: 11}, {Kind: KindMark, Table: "t", CommitTs: 12}}
	log := &scriptedLog{answers: []func(Cursor) ([]Event, Cursor, error){
		func(Cursor) ([]Event, Cursor, error) { return nil, Cursor{}, errors.New("the node does not answer") },
		func(Cursor) ([]Event, Cursor, error) { return append([]Event(nil), rows...), Cursor{Done: 12}, nil },
		func(Cursor) ([]Event, Cursor, error) { return append([]Event(nil), rows...), Cursor{Done: 12}, nil },
	}}
	s := NewLogSource(Env{Changefeed: "cf", Logs: log}, []string{"t"}, 0)
	r, err := s.Open(model.Span{Table: "t"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := r.Read(context.Background(), 20, 100); err == nil || evs != nil || r.Position() != 10 {
		t.Fatalf("a failed read: %v, %v, position %d; want its error, nothing, position 10", evs, err, r.Position())
	}
	evs, err := r.Read(context.Background(), 20, 100)
	if err != nil || len(evs) != 1 || evs[0].Kind != KindDML || r.Position() != 12 {
		t.Fatalf("the read after it: %v, %v, position %d; want the row without the watermark, position 12", evs, err, r.Position())
	}
	if log.froms[0].Done != 10 || log.froms[1].Done != 10 {
		t.Fatalf("the reads asked from %v; want both from 10", log.froms)
	}
	marked := s.OpenMarked(model.Span{Table: "t"}, 10)
	if evs, err := marked.Read(context.Background(), 20, 100); err != nil || len(evs) != 2 {
		t.Fatalf("a marked read: %v, %v; want the row and its watermark", evs, err)
	}
}

// A partition's plain reader (its copy done) leaves the table's
// watermarks out; a read that met only watermarks (other partitions
// copying the table) reads on to the rows after them, so the dispatcher
// does not back off once per watermark.
func TestAPlainReaderReadsOnPastWatermarks(t *testing.T) {
	mark := func(ts model.Ts) func(Cursor) ([]Event, Cursor, error) {
		return func(Cursor) ([]Event, Cursor, error) {
			return []Event{{Kind: KindMark, Table: "t", CommitTs: ts}}, Cursor{Done: ts}, nil
		}
	}
	log := &scriptedLog{answers: []func(Cursor) ([]Event, Cursor, error){
		mark(11), mark(12), mark(13),
		func(Cursor) ([]Event, Cursor, error) {
			return []Event{{Kind: KindDML, Table: "t", Key: "a", CommitTs: 14}}, Cursor{Done: 14}, nil
		},
	}}
	r, err := NewLogSource(Env{Changefeed: "cf", Logs: log}, []string{"t"}, 0).Open(model.Span{Table: "t"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := r.Read(context.Background(), 20, 100)
	if err != nil || len(evs) != 1 || evs[0].Key != "a" || r.Position() != 14 || len(log.froms) != 4 {
		t.Fatalf("one read: %v, %v, position %d after %d reads of the log; want the row, position 14, 4 reads", evs, err, r.Position(), len(log.froms))
	}
}
