package eventlog

// The log's newest rows are kept in memory, as Read returns them, while
// the node's logs have room for them; past that a log writes its oldest
// rows into its store ("spills" them). Most rows are read by their
// partition soon after they are appended and trimmed at the next
// checkpoint: kept in memory they are never encoded, written, compacted
// and decoded again, which was most of the log's CPU in a streaming run.
// The store keeps its role for what memory cannot hold: a partition that
// reads far behind (a slow sink, a move) and a backlog larger than the
// room. A table's rows are split at one position: those below it are in
// the store, every one from it on is in memory.
//
// Kept rows share their values with the events the source appended:
// neither the sources nor the readers change an event once appended, and
// every Read returns a slice of its own.

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// pos is a row's place in its table: its commit position and its number
// there (a transaction's summary is numbered last, txnSeq).
type pos struct {
	ts  model.Ts
	seq uint32
}

func (p pos) before(q pos) bool { return p.ts < q.ts || p.ts == q.ts && p.seq < q.seq }

// after is the first place after p.
func (p pos) after() pos {
	if p.seq == txnSeq {
		return pos{ts: p.ts + 1}
	}
	return pos{ts: p.ts, seq: p.seq + 1}
}

// keptRow is a row held in memory: the event as Read returns it.
type keptRow struct {
	seq  uint32
	size int64
	e    source.Event
}

func (k *keptRow) pos() pos { return pos{k.e.CommitTs, k.seq} }

// keptOverhead is about what a kept row takes besides its text: the row
// and its event, and each value's header.
const keptOverhead, valueOverhead = 200, 24

// tableTail is what memory holds of one table.
type tableTail struct {
	rows rowQueue // in their order
	// from is where memory starts: rows holds every row of the table at
	// or after it, the store the ones before.
	from pos
	// stored says the store may hold rows of the table.
	stored bool
}

// run is consecutive rows of one table as they were appended, up to its
// last; runs are spilled oldest first.
type run struct {
	table string
	last  pos
	rows  int
}

// runRows bounds a run: a spill writes a table's oldest rows, not every
// row a busy table has in memory.
const runRows = 1024

// tail is what a log keeps in memory.
type tail struct {
	mem    *Memory // nil: nothing is kept, every row goes to the store
	tables map[string]*tableTail
	runs   []run
	head   int // runs before it are spilled or trimmed
	bytes  int64
	// held and oldest are bytes and the position of the oldest run, for
	// the room to read without the log's lock.
	held, oldest atomic.Uint64
}

// markOldest notes where the oldest run is, after runs came or went,
// passing over runs whose rows are gone (written by storePart, erased).
func (t *tail) markOldest() {
	for t.head < len(t.runs) {
		r := t.runs[t.head]
		if tt := t.tables[r.table]; tt != nil && tt.rows.len() > 0 && !r.last.before(tt.rows.at(0).pos()) {
			t.oldest.Store(uint64(r.last.ts))
			return
		}
		t.runs[t.head] = run{}
		t.head++
	}
	t.oldest.Store(math.MaxUint64)
}

// keep adds a row (at seq of its position) to memory.
func (t *tail) keep(e source.Event, seq uint32) {
	tt := t.tables[e.Table]
	if tt == nil {
		tt = &tableTail{}
		t.tables[e.Table] = tt
	}
	size := int64(keptOverhead + e.Size() + valueOverhead*(len(e.New)+len(e.Old)))
	tt.rows.push(keptRow{seq: seq, size: size, e: e})
	t.grow(size)
	at := pos{e.CommitTs, seq}
	if n := len(t.runs); n > t.head && t.runs[n-1].table == e.Table && t.runs[n-1].rows < runRows {
		t.runs[n-1].last = at
		t.runs[n-1].rows++
	} else {
		t.runs = append(t.runs, run{table: e.Table, last: at, rows: 1})
		if len(t.runs) == t.head+1 {
			t.markOldest()
		}
	}
}

func (t *tail) grow(n int64) {
	t.bytes += n
	t.held.Store(uint64(t.bytes))
	if t.mem != nil {
		t.mem.used.Add(n)
	}
}

// overShare says the log must spill, once freed bytes are written: it
// holds more than half the room (a log whose sink is down must not take
// every other log's room), or it keeps nothing (no room).
func (t *tail) overShare(freed int64) bool {
	mine := t.bytes - freed
	return mine > 0 && (t.mem == nil || 2*mine > t.mem.max)
}

// overRoom says the node's logs hold more than their room once freed
// bytes of this one are written.
func (t *tail) overRoom(freed int64) bool {
	return t.bytes-freed > 0 && t.mem.used.Load()-freed > t.mem.max
}

// spill writes the oldest runs into the store while over says so;
// memory lets go of them only once they are there.
func (l *Log) spill(over func(freed int64) bool) error {
	t := &l.tail
	if !over(0) {
		return nil
	}
	b := l.db.NewBatch()
	defer b.Close()
	// How far each table's rows are written: memory lets go of them
	// once the batch is committed.
	type spilled struct {
		n    int
		last pos
	}
	done := map[*tableTail]*spilled{}
	var val []byte
	freed, head := int64(0), t.head
	for ; over(freed) && head < len(t.runs); head++ {
		r := t.runs[head]
		tt := t.tables[r.table]
		if tt == nil {
			continue // trimmed
		}
		d := done[tt]
		if d == nil {
			d = &spilled{}
			done[tt] = d
		}
		for d.n < tt.rows.len() && !r.last.before(tt.rows.at(d.n).pos()) {
			k := tt.rows.at(d.n)
			var err error
			if val, err = l.put(b, val, k); err != nil {
				return err
			}
			freed += k.size
			d.n++
		}
		d.last = r.last
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("event log: %w", err)
		}
	}
	for tt, d := range done {
		for j := 0; j < d.n; j++ {
			t.grow(-tt.rows.at(j).size)
		}
		tt.rows.dropFront(d.n)
		if tt.from.before(d.last.after()) {
			tt.from = d.last.after()
		}
		if d.n > 0 {
			tt.stored = true
		}
	}
	clear(t.runs[t.head:head])
	t.head = head
	t.compactRuns()
	t.markOldest()
	return nil
}

// compactRuns lets go of the runs spilled or trimmed, once they are most
// of the slice: runs are appended for as long as the log lives.
func (t *tail) compactRuns() {
	if t.head > 1024 && 2*t.head > len(t.runs) {
		n := copy(t.runs, t.runs[t.head:])
		clear(t.runs[n:])
		t.runs, t.head = t.runs[:n], 0
		if cap(t.runs) > 4*n+1024 {
			t.runs = append(make([]run, 0, 2*n), t.runs...) // after a burst
		}
	}
}

// put adds a kept row to a batch of the store, encoded in val's space.
func (l *Log) put(b *pebble.Batch, val []byte, k *keptRow) ([]byte, error) {
	if k.e.Kind == source.KindTxn {
		val = l.encodeSummary(val[:0], &k.e)
	} else {
		val = l.encode(val[:0], &k.e, k.e.TxnTableOrder)
	}
	if err := b.Set(rowKey(k.e.Table, k.e.CommitTs, k.seq), val, nil); err != nil {
		return val, fmt.Errorf("event log: %w", err)
	}
	return val, nil
}

// storePart writes a part of a transaction still being received into the
// store at once: parts exist so that a large transaction costs disk, not
// memory, and its rows are read only after its commit anyway. The rows
// memory holds of the part's tables are older: they go first, keeping
// each table's rows below where memory starts in the store.
func (l *Log) storePart(part []keptRow) error {
	t := &l.tail
	b := l.db.NewBatch()
	defer b.Close()
	var val []byte
	var err error
	last := map[string]pos{} // each table's last row of the part
	for i := range part {
		table := part[i].e.Table
		if _, seen := last[table]; !seen {
			if tt := t.tables[table]; tt != nil {
				for j := 0; j < tt.rows.len(); j++ {
					if val, err = l.put(b, val, tt.rows.at(j)); err != nil {
						return err
					}
				}
			}
		}
		if val, err = l.put(b, val, &part[i]); err != nil {
			return err
		}
		last[table] = part[i].pos()
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	for table, p := range last {
		if l.parted == nil {
			l.parted = map[string]bool{}
		}
		l.parted[table] = true
		tt := t.tables[table]
		if tt == nil {
			tt = &tableTail{}
			t.tables[table] = tt
		}
		for j := 0; j < tt.rows.len(); j++ {
			t.grow(-tt.rows.at(j).size)
		}
		tt.rows.dropFront(tt.rows.len())
		tt.from, tt.stored = p.after(), true
	}
	t.markOldest()
	return nil
}

// trim drops the rows at or below ts from memory.
func (t *tail) trim(ts model.Ts) {
	for name, tt := range t.tables {
		n := 0
		for n < tt.rows.len() && tt.rows.at(n).e.CommitTs <= ts {
			t.grow(-tt.rows.at(n).size)
			n++
		}
		tt.rows.dropFront(n)
		if tt.rows.len() == 0 && !(pos{ts: ts + 1}).before(tt.from) {
			// Nothing of the table is left above ts, here or in the
			// store: a new row of it starts memory afresh.
			delete(t.tables, name)
		}
	}
	for t.head < len(t.runs) && t.runs[t.head].last.ts <= ts {
		t.runs[t.head] = run{}
		t.head++
	}
	t.compactRuns()
	t.markOldest()
}

// erase drops a table's rows at ts (the open transaction's) from memory
// and says whether the store may hold some.
func (t *tail) erase(table string, ts model.Ts) bool {
	tt := t.tables[table]
	if tt == nil {
		return false
	}
	n := 0
	for l := tt.rows.len(); n < l && tt.rows.at(l-1-n).e.CommitTs == ts; n++ {
		t.grow(-tt.rows.at(l - 1 - n).size)
	}
	tt.rows.dropBack(n)
	return tt.stored
}

// release gives the log's room back.
func (t *tail) release() {
	t.grow(-t.bytes)
	t.tables, t.runs, t.head = map[string]*tableTail{}, nil, 0
	t.markOldest()
}
