package eventlog

// How the log stores rows: their keys (table, position, sequence), the
// row encoding and its decoding into events, and the transactions'
// summaries (Options.Transactions).

import (
	"encoding/binary"
	"errors"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// rowKey is table, 0, position (big-endian), sequence: a table's rows in
// commit order, the rows of one transaction in their order.
func rowKey(table string, ts model.Ts, seq uint32) []byte {
	k := make([]byte, 0, len(table)+13)
	k = append(k, table...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, uint64(ts))
	return binary.BigEndian.AppendUint32(k, seq)
}

func posOfKey(k []byte) (model.Ts, uint32) {
	return model.Ts(binary.BigEndian.Uint64(k[len(k)-12:])), binary.BigEndian.Uint32(k[len(k)-4:])
}

// The row encoding: definition id, operation, schema version, table
// version, key, then the new and old values, each a count and per value
// a flag and the text.
const (
	valText byte = iota
	valNull
	valUnchanged
)

func (l *Log) defID(d *source.TableDef) uint32 {
	if id, ok := l.defIDs[d]; ok {
		return id
	}
	id := uint32(len(l.defs))
	l.defs = append(l.defs, d)
	l.defIDs[d] = id
	return id
}

func (l *Log) encode(b []byte, e *source.Event, tableOrder uint32) []byte {
	b = binary.AppendUvarint(b, uint64(l.defID(e.Def)))
	b = append(b, byte(e.Op))
	b = binary.AppendUvarint(b, e.SchemaVersion)
	b = binary.AppendUvarint(b, uint64(e.TableVersion))
	b = appendString(b, e.Key)
	b = binary.AppendUvarint(b, uint64(tableOrder))
	b = appendValues(b, e.New)
	return appendValues(b, e.Old)
}

// countRow counts a row into the open transaction's summary and returns
// its place among the transaction's rows of its table, from 1.
func (l *Log) countRow(e *source.Event) uint32 {
	for i := range l.counts {
		if c := &l.counts[i]; c.table == e.Table {
			c.n++
			return c.n
		}
	}
	l.counts = append(l.counts, tableRows{table: e.Table, first: e.Key, def: e.Def, n: 1})
	return 1
}

// summary is the open transaction's summary as an event of its first
// table: operation 0 (none is a real row's) and its first row's key, so
// that a span's read finds it where it finds that row.
func (l *Log) summary() source.Event {
	first := l.counts[0]
	t := &source.TxnSummary{SourceID: l.sourceID, Tables: make([]source.TableCount, len(l.counts))}
	for i, c := range l.counts {
		t.Tables[i] = source.TableCount{Table: c.table, Events: int(c.n)}
		t.Events += int(c.n)
	}
	return source.Event{Kind: source.KindTxn, Table: first.table, CommitTs: l.seqTs, Def: first.def, Key: first.first, Txn: t}
}

// encodeSummary encodes a transaction's summary as a row's head, then
// the source's id of it and the counts by table.
func (l *Log) encodeSummary(b []byte, e *source.Event) []byte {
	b = binary.AppendUvarint(b, uint64(l.defID(e.Def)))
	b = append(b, 0)
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendUvarint(b, 0)
	b = appendString(b, e.Key)
	b = binary.AppendUvarint(b, 0)
	b = appendString(b, e.Txn.SourceID)
	b = binary.AppendUvarint(b, uint64(len(e.Txn.Tables)))
	for _, c := range e.Txn.Tables {
		b = appendString(b, c.Table)
		b = binary.AppendUvarint(b, uint64(c.Events))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendValues(b []byte, vs []source.Value) []byte {
	if vs == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(vs))+1)
	for _, v := range vs {
		switch {
		case v.Null:
			b = append(b, valNull)
		case v.Unchanged:
			b = append(b, valUnchanged)
		default:
			b = append(b, valText)
			b = appendString(b, v.Text)
		}
	}
	return b
}

type decoder struct {
	b   []byte
	a   *source.Arena
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("event log: corrupt row")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errors.New("event log: corrupt row")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || uint64(len(d.b)) < n {
		d.err = errors.New("event log: corrupt row")
		return ""
	}
	s := d.a.String(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) values() []source.Value {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	if n-1 > uint64(len(d.b)) {
		d.err = errors.New("event log: corrupt row") // each value takes a byte at least
		return nil
	}
	out := d.a.Values(int(n - 1))
	for i := range out {
		switch d.byte() {
		case valNull:
			out[i] = source.Null
		case valUnchanged:
			out[i] = source.Value{Unchanged: true}
		default:
			out[i] = source.Text(d.string())
		}
	}
	return out
}

// decodeKey decodes a row's head up to its key: enough to tell whether
// a span holds it before its values are decoded.
func (l *Log) decodeKey(a *source.Arena, table string, ts model.Ts, seq uint32, b []byte) (source.Event, decoder, error) {
	d := decoder{b: b, a: a} // returned by value: a pointer was an allocation per row
	id := d.uvarint()
	e := source.Event{Kind: source.KindDML, Table: table, CommitTs: ts}
	e.Op = source.Op(d.byte())
	e.SchemaVersion = d.uvarint()
	e.TableVersion = model.Ts(d.uvarint())
	e.Key = d.string()
	if e.Op == 0 {
		e.Kind = source.KindTxn
	}
	if tableOrder := d.uvarint(); tableOrder > 0 {
		e.TxnOrder, e.TxnTableOrder = seq+1, uint32(tableOrder)
	}
	if d.err != nil {
		return source.Event{}, d, d.err
	}
	if id >= uint64(len(l.defs)) {
		return source.Event{}, d, errors.New("event log: a row names an unknown table definition")
	}
	e.Def = l.defs[id]
	return e, d, nil
}

// decodeValues decodes the rest of a row decodeKey began.
func decodeValues(e *source.Event, d *decoder) error {
	if e.Kind == source.KindTxn {
		t := &source.TxnSummary{SourceID: d.string()}
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return errors.New("event log: corrupt transaction summary")
		}
		for range n {
			c := source.TableCount{Table: d.string(), Events: int(d.uvarint())}
			t.Tables = append(t.Tables, c)
			t.Events += c.Events
		}
		e.Txn = t
		return d.err
	}
	e.New = d.values()
	e.Old = d.values()
	return d.err
}
