package eventlog

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Read returns a span's rows after a cursor and up to upTo, oldest first,
// and the cursor after them. It stops after about max rows, at the end of
// a position, except inside a transaction that alone has max rows of the
// span: that one it returns in parts, the cursor inside it. It never
// reads past the resolved position, nor past the table's next schema
// change (the caller meets that change through DDLs first). A watermark
// of the table (KindMark) ends a read: it is its last event. The slice is
// the caller's; the events' values and summaries are shared with the log
// and every other read of them, and must not be changed.
func (l *Log) Read(span model.Span, from source.Cursor, upTo model.Ts, maxRows int) ([]source.Event, source.Cursor, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, from, errors.New("event log: closed")
	}
	if from.Done < l.trimmed {
		return nil, from, fmt.Errorf("%w (asked from %v, the log starts at %v)", ErrTrimmed, from.Done, l.trimmed)
	}
	upTo = l.upToFor(span.Table, min(upTo, l.resolved))
	for _, d := range l.ddls[span.Table] {
		if d.CommitTs > from.Done {
			upTo = min(upTo, d.CommitTs-1)
			break
		}
	}
	var mark *source.Event
	for i, m := range l.marks[span.Table] {
		if m.CommitTs > from.Done {
			if m.CommitTs <= upTo {
				mark, upTo = &l.marks[span.Table][i], m.CommitTs
			}
			break
		}
	}
	if upTo <= from.Done || from.Inside() && upTo < from.At {
		return nil, from, nil
	}
	lower, upper := pos{ts: from.Done + 1}, pos{ts: upTo + 1}
	if from.Inside() {
		lower = pos{from.At, from.Seq}
	}
	r := reading{span: span, max: maxRows}
	// The store holds the table's rows before where memory starts, memory
	// every one from there; a table memory has nothing of has no rows
	// above the checkpoint.
	if tt := l.tail.tables[span.Table]; tt != nil {
		inStore := upper
		if tt.from.before(upper) {
			inStore = tt.from
		}
		if tt.stored && lower.before(inStore) {
			if done, err := l.readStore(&r, lower, inStore); done || err != nil {
				return r.out, r.cursor, err
			}
		}
		for i := tt.rows.search(lower); i < tt.rows.len() && tt.rows.at(i).pos().before(upper); i++ {
			k := tt.rows.at(i)
			if r.full(k.pos()) {
				return r.out, r.cursor, nil
			}
			if span.Contains(k.e.Key) {
				r.add(k.e)
			}
		}
	}
	if mark != nil {
		// No row shares a watermark's position: every row before it has
		// been returned.
		r.out = append(r.out, *mark)
	}
	return r.out, source.Cursor{Done: upTo}, nil
}

// readStore reads the table's rows in [lower, upper) from the store; done
// says the read is full.
func (l *Log) readStore(r *reading, lower, upper pos) (bool, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: rowKey(r.span.Table, lower.ts, lower.seq), UpperBound: rowKey(r.span.Table, upper.ts, upper.seq)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	// The rows' strings and values are cut from a few large blocks, not
	// allocated one by one (decoding was most of a read's CPU); a block
	// is never written again once cut from, so the strings stay valid.
	var a source.Arena
	for it.First(); it.Valid(); it.Next() {
		ts, seq := posOfKey(it.Key())
		if r.full(pos{ts, seq}) {
			return true, nil
		}
		e, d, err := l.decodeKey(&a, r.span.Table, ts, seq, it.Value())
		if err != nil {
			return false, err
		}
		if r.span.Contains(e.Key) {
			if err := decodeValues(&e, &d); err != nil {
				return false, err
			}
			r.add(e)
		}
	}
	return false, it.Error()
}

// reading is one Read's rows so far.
type reading struct {
	span   model.Span
	max    int
	out    []source.Event
	same   int // rows of the span at the last row's position
	cursor source.Cursor
}

// full says the read ends before the row at p (and sets its cursor): it
// has max rows and p is at another position, or the last position alone
// has max rows (a large transaction, returned in parts).
func (r *reading) full(p pos) bool {
	n := len(r.out)
	if n < r.max {
		return false
	}
	if last := r.out[n-1].CommitTs; p.ts != last {
		r.cursor = source.Cursor{Done: last}
		return true
	}
	if r.same >= r.max {
		r.cursor = source.Cursor{Done: p.ts - 1, At: p.ts, Seq: p.seq}
		return true
	}
	return false
}

func (r *reading) add(e source.Event) {
	if n := len(r.out); n == 0 || r.out[n-1].CommitTs != e.CommitTs {
		r.same = 0
	}
	if len(r.out) == cap(r.out) {
		// Not from one, nor by doubling: a read of thousands of rows
		// copied them again at every doubling (a twentieth of a streaming
		// run's CPU). Not of max rows at once either: most reads of a
		// changefeed of many tables find a row or two.
		r.out = slices.Grow(r.out, max(min(r.max, 8*cap(r.out)), 2*cap(r.out), 32)-len(r.out))
	}
	r.out = append(r.out, e)
	r.same++
}

// countStored counts a table's rows the store holds at ts numbered from
// seq from up to seq upTo.
func (l *Log) countStored(table string, ts model.Ts, from, upTo uint32) (uint32, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: rowKey(table, ts, from), UpperBound: rowKey(table, ts, upTo)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var n uint32
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n, it.Error()
}
