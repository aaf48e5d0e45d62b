package postgres

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// encodeTuple writes a TupleData: each column nil (NULL), "\x00u" (an
// unchanged TOAST value) or its text.
func encodeTuple(cols []*string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		switch {
		case c == nil:
			b = append(b, 'n')
		case *c == "\x00u":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*c)))
			b = append(b, *c...)
		}
	}
	return b
}

func randomTuple(r *rand.Rand, n int) []*string {
	cols := make([]*string, n)
	for i := range cols {
		switch r.IntN(5) {
		case 0:
		case 1:
			u := "\x00u"
			cols[i] = &u
		default:
			v := make([]byte, r.IntN(40))
			for j := range v {
				v[j] = byte(r.IntN(256))
			}
			s := string(v)
			cols[i] = &s
		}
	}
	return cols
}

// pglogreplValues is what pglogrepl decodes a tuple into, as values.
func pglogreplValues(t *pglogrepl.TupleData) []source.Value {
	if t == nil {
		return nil
	}
	out := make([]source.Value, len(t.Columns))
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			out[i] = source.Null
		case pglogrepl.TupleDataTypeToast:
			out[i] = source.Value{Unchanged: true}
		default:
			out[i] = source.Text(string(c.Data))
		}
	}
	return out
}

// same checks our decoding of a row message against pglogrepl's where
// ours takes it; it says whether ours did. pglogrepl is not asked about
// a message ours refuses: it indexes past the end of some short ones
// and allocates what a length says (the fuzzer's process was killed for
// a 4 GB one).
func same(t *testing.T, msg []byte) bool {
	t.Helper()
	ours, err := parseRowMessage(msg)
	if err != nil {
		return false
	}
	theirs, perr := parseOrPanic(msg)
	if perr != nil {
		// pglogrepl refuses a few framings ours takes (a tuple of no
		// columns, which no replicated table has: decodeTuple then
		// refuses its width).
		return true
	}
	var rel uint32
	var op source.Op
	var newT, oldT *pglogrepl.TupleData
	whole := false
	switch m := theirs.(type) {
	case *pglogrepl.InsertMessage:
		rel, op, newT = m.RelationID, source.OpInsert, m.Tuple
	case *pglogrepl.UpdateMessage:
		rel, op, newT, oldT, whole = m.RelationID, source.OpUpdate, m.NewTuple, m.OldTuple, m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld
	case *pglogrepl.DeleteMessage:
		rel, op, oldT, whole = m.RelationID, source.OpDelete, m.OldTuple, m.OldTupleType == pglogrepl.DeleteMessageTupleTypeOld
	default:
		t.Fatalf("%x: ours decodes a row message, pglogrepl a %T", msg, theirs)
	}
	if ours.rel != rel || ours.op != op || (ours.oldTuple != nil) != (oldT != nil) || (ours.newTuple != nil) != (newT != nil) || ours.oldTuple != nil && ours.wholeOld != whole {
		t.Fatalf("%x: ours %+v, pglogrepl %+v", msg, ours, theirs)
	}
	var a source.Arena
	for _, pair := range []struct {
		ours   []byte
		theirs *pglogrepl.TupleData
	}{{ours.newTuple, newT}, {ours.oldTuple, oldT}} {
		if pair.ours == nil {
			continue
		}
		want := pglogreplValues(pair.theirs)
		got, err := decodeTuple(pair.ours, len(want), &a)
		if err != nil {
			if allText(theirs) {
				t.Fatalf("%x: ours fails to decode a tuple pglogrepl decodes: %v", msg, err)
			}
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%x: column %d: ours %+v, pglogrepl %+v", msg, i, got[i], want[i])
			}
		}
	}
	return true
}

var errPglogreplPanicked = errors.New("pglogrepl panicked")

func parseOrPanic(msg []byte) (m pglogrepl.Message, err error) {
	defer func() {
		if recover() != nil {
			m, err = nil, errPglogreplPanicked
		}
	}()
	return pglogrepl.Parse(msg)
}

// allText: every column null, unchanged or text (the stream asks for
// text; ours refuses binary values and unknown kinds, which pglogrepl
// takes).
func allText(m pglogrepl.Message) bool {
	var ts []*pglogrepl.TupleData
	switch m := m.(type) {
	case *pglogrepl.InsertMessage:
		ts = append(ts, m.Tuple)
	case *pglogrepl.UpdateMessage:
		ts = append(ts, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		ts = append(ts, m.OldTuple)
	default:
		return false
	}
	for _, t := range ts {
		if t == nil {
			continue
		}
		for _, c := range t.Columns {
			switch c.DataType {
			case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast, pglogrepl.TupleDataTypeText:
			default:
				return false // binary, or a kind pgoutput has not (pglogrepl takes any)
			}
		}
	}
	return true
}

func rowMessageBytes(kind byte, rel uint32, old byte, oldT, newT []*string) []byte {
	b := append([]byte{kind}, binary.BigEndian.AppendUint32(nil, rel)...)
	if old != 0 {
		b = append(b, old)
		b = append(b, encodeTuple(oldT)...)
	}
	if kind != 'D' {
		b = append(b, 'N')
		b = append(b, encodeTuple(newT)...)
	}
	return b
}

// Inserts, updates (with a key, a whole old row, or none) and deletes of
// random rows decode as pglogrepl decodes them, and every way of
// cutting one short is an error, never a panic.
func TestRowMessagesDecodeAsPglogreplDecodesThem(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + r.IntN(12)
		var msg []byte
		switch r.IntN(5) {
		case 0:
			msg = rowMessageBytes('I', r.Uint32(), 0, nil, randomTuple(r, n))
		case 1:
			msg = rowMessageBytes('U', r.Uint32(), 0, nil, randomTuple(r, n))
		case 2:
			msg = rowMessageBytes('U', r.Uint32(), "KO"[r.IntN(2)], randomTuple(r, n), randomTuple(r, n))
		default:
			msg = rowMessageBytes('D', r.Uint32(), "KO"[r.IntN(2)], randomTuple(r, n), nil)
		}
		if !same(t, msg) {
			t.Fatalf("%x: ours refuses a well-formed row message", msg)
		}
		for cut := range len(msg) {
			if m, err := parseRowMessage(msg[:cut]); err == nil {
				if _, err := decodeTuple(m.newTuple, n, new(source.Arena)); m.newTuple != nil && err != nil {
					t.Fatalf("%x cut at %d: parsed, then its tuple fails: %v", msg, cut, err)
				}
			}
		}
	}
}

// A column count other than the table's is an error naming both.
func TestATupleOfAnotherWidthIsRefused(t *testing.T) {
	v := "1"
	m, err := parseRowMessage(rowMessageBytes('I', 7, 0, nil, []*string{&v, &v}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeTuple(m.newTuple, 3, new(source.Arena)); err == nil || err.Error() != "a row has 2 columns, its table definition 3" {
		t.Fatalf("got %v", err)
	}
}

func FuzzRowMessage(f *testing.F) {
	a, b := "42", "hello"
	f.Add(rowMessageBytes('I', 1, 0, nil, []*string{&a, nil, &b}))
	f.Add(rowMessageBytes('U', 1, 'K', []*string{&a, nil}, []*string{&a, &b}))
	f.Add(rowMessageBytes('D', 1, 'O', []*string{&a, &b}, nil))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) == 0 || (msg[0] != 'I' && msg[0] != 'U' && msg[0] != 'D') {
			return
		}
		same(t, msg)
	})
}
