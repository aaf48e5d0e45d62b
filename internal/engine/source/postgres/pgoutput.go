package postgres

// pgoutput's row messages (Insert, Update, Delete), decoded here rather
// than by pglogrepl: its decoder copies every column into a new slice
// behind a new pointer before the values are made strings, a quarter of
// what the streaming path allocated per row. Here a tuple is read in
// place, its values land in the stream's arena, and a message whose
// relation is not replicated is not decoded at all. Every other message
// still goes through pglogrepl.Parse.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// rowMessage is one Insert, Update or Delete, its tuples not decoded yet:
// each is the encoding of a TupleData, nil when the message has none.
type rowMessage struct {
	rel      uint32
	op       source.Op
	newTuple []byte
	oldTuple []byte
	// wholeOld: the old tuple is the whole old row ('O', REPLICA
	// IDENTITY FULL), not only its key ('K').
	wholeOld bool
}

var errShortMessage = errors.New("pgoutput message ends early")

// parseRowMessage reads the framing of an 'I', 'U' or 'D' message
// (protocol version 1: Int32 relation, then 'K' or 'O' and the old tuple
// where there is one, then 'N' and the new tuple where there is one).
func parseRowMessage(b []byte) (rowMessage, error) {
	if len(b) < 6 {
		return rowMessage{}, errShortMessage
	}
	m := rowMessage{rel: binary.BigEndian.Uint32(b[1:5])}
	rest := b[5:]
	kind := b[0]
	switch kind {
	case 'I':
		m.op = source.OpInsert
	case 'U':
		m.op = source.OpUpdate
	case 'D':
		m.op = source.OpDelete
	default:
		return rowMessage{}, fmt.Errorf("pgoutput message %q is not a row change", kind)
	}
	if kind != 'I' && (rest[0] == 'K' || rest[0] == 'O') {
		n, err := tupleLen(rest[1:])
		if err != nil {
			return rowMessage{}, err
		}
		m.oldTuple, m.wholeOld = rest[1:1+n], rest[0] == 'O'
		rest = rest[1+n:]
	}
	switch {
	case kind == 'D':
		if m.oldTuple == nil {
			return rowMessage{}, fmt.Errorf("pgoutput delete has no old tuple (%q)", rest[0])
		}
	case len(rest) == 0:
		return rowMessage{}, errShortMessage
	case rest[0] != 'N':
		return rowMessage{}, fmt.Errorf("pgoutput row message has %q where its new tuple begins", rest[0])
	default:
		n, err := tupleLen(rest[1:])
		if err != nil {
			return rowMessage{}, err
		}
		m.newTuple = rest[1 : 1+n]
	}
	return m, nil
}

// tupleLen is the length of the TupleData that b begins with: Int16
// columns, then each column's kind ('n' null, 'u' unchanged TOAST, 't'
// text or 'b' binary, the last two with an Int32 length and the bytes).
func tupleLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, errShortMessage
	}
	cols, at := int(binary.BigEndian.Uint16(b)), 2
	for range cols {
		if at >= len(b) {
			return 0, errShortMessage
		}
		kind := b[at]
		at++
		switch kind {
		case 'n', 'u':
		case 't', 'b':
			if at+4 > len(b) {
				return 0, errShortMessage
			}
			n := int(binary.BigEndian.Uint32(b[at:]))
			if n < 0 || n > len(b)-at-4 {
				return 0, errShortMessage
			}
			at += 4 + n
		default:
			return 0, fmt.Errorf("pgoutput tuple column of kind %q", kind)
		}
	}
	return at, nil
}

// decodeTuple turns a tuple tupleLen has measured into values in column
// order, from the arena. An old tuple of an update or delete under the
// default replica identity holds only the key columns: the others come
// as NULL (decodeRow marks them unknown).
func decodeTuple(t []byte, n int, a *source.Arena) ([]source.Value, error) {
	if cols := int(binary.BigEndian.Uint16(t)); cols != n {
		return nil, fmt.Errorf("a row has %d columns, its table definition %d", cols, n)
	}
	out, at := a.Values(n), 2
	for i := range out {
		kind := t[at]
		at++
		switch kind {
		case 'n':
			out[i] = source.Null
		case 'u':
			out[i] = source.Value{Unchanged: true}
		case 't':
			l := int(binary.BigEndian.Uint32(t[at:]))
			out[i] = source.Text(a.String(t[at+4 : at+4+l]))
			at += 4 + l
		default:
			return nil, errors.New("pgoutput sent a binary value; the stream is requested in text")
		}
	}
	return out, nil
}
