// Package eventlog is a database source's event log (TiCDC's event store
// is the model): one upstream reader per changefeed appends committed
// transactions to it, and every partition's dispatcher reads its key
// range from any position at or after the checkpoint. The newest rows
// are kept in memory within a room the node's logs share (tail.go); the
// older ones live in an embedded pebble store, so a large transaction or
// a slow partition costs disk, not memory. Table definitions and schema
// changes, which are few, are kept in memory.
//
// A log lives as long as its reader: a reader started elsewhere (its
// changefeed's maintainer moved) rebuilds its log from the checkpoint.
//
// It imports model, source and transport (remote reads). Database
// sources read it through source.LogSource and the Env's Logs, and write
// it through source.LogWriter; none imports this package.
package eventlog

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Log is one changefeed's event log. It is safe for concurrent use: one
// writer appends while any number of readers read.
type Log struct {
	db *pebble.DB

	mu       sync.RWMutex
	resolved model.Ts
	trimmed  model.Ts // events at or below it are gone
	defs     []*source.TableDef
	defIDs   map[*source.TableDef]uint32
	ddls     map[string][]source.Event // by table, in order
	marks    map[string][]source.Event // the snapshot's watermarks, by table, in order
	tail     tail                      // the newest rows, in memory
	// held are tables that cannot go on (a rename, a row that does not
	// decode): nothing of theirs at or above the position is read, so
	// their partitions' checkpoints stay below it while the others'
	// advance.
	held    map[string]model.Ts
	changed chan struct{} // closed and replaced on every append
	closed  bool
	seqTs   model.Ts // the position rows are being numbered at
	seq     uint32   // the next row's number there
	// parted are the tables parts added rows of at seqTs, not resolved
	// yet (TruncatePart).
	parted map[string]bool

	// With Options.Transactions: the open transaction's rows by table, in
	// the order it first wrote each (summed into its KindTxn summary at
	// its commit).
	txns     bool
	counts   []tableRows
	sourceID string // the open transaction's id at the source
}

// tableRows is how many rows the open transaction wrote into a table, and
// the first one's key.
type tableRows struct {
	table, first string
	def          *source.TableDef
	n            uint32
}

// Options are how a log is kept.
type Options struct {
	// Transactions numbers each row within its transaction (TxnOrder,
	// TxnTableOrder) and adds, at each commit, the transaction's summary
	// (a KindTxn event, returned to the partition of its first row): for
	// sinks that write transaction boundaries.
	Transactions bool
	// Memory is the node's room for the logs' newest rows, kept in
	// memory until they are trimmed or the room is full (tail.go); nil
	// writes every row into the store at once.
	Memory *Memory
}

// txnSeq is the sequence number a transaction's summary is stored at,
// under its first row's table: after every row of the transaction.
const txnSeq = math.MaxUint32

// ErrTrimmed means a read asked for positions the log no longer holds.
var ErrTrimmed = errors.New("event log: positions below the checkpoint were trimmed")

// Open opens an empty log in dir; "" keeps it in memory.
func Open(dir string, start model.Ts, o Options) (*Log, error) {
	opts := &pebble.Options{DisableWAL: true, Logger: quietLogger{}}
	if dir == "" {
		opts.FS = vfs.NewMem()
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	l := &Log{db: db, resolved: start, trimmed: start, defIDs: map[*source.TableDef]uint32{},
		ddls: map[string][]source.Event{}, marks: map[string][]source.Event{}, tail: tail{mem: o.Memory, tables: map[string]*tableTail{}}, held: map[string]model.Ts{}, changed: make(chan struct{}), txns: o.Transactions}
	if o.Memory != nil {
		o.Memory.join(l)
	}
	return l, nil
}

// Close releases the store; reads after it return nothing.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.changed)
	l.tail.release()
	if l.tail.mem != nil {
		l.tail.mem.leave(l)
	}
	return l.db.Close()
}

// Bytes is the space the log takes: its files on disk (with what its
// store has not compacted away yet), its memtables and the rows it keeps
// in memory (0 once closed). A log that keeps growing holds changes some
// partition has not read: trimming goes by the changefeed's checkpoint.
func (l *Log) Bytes() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	m := l.db.Metrics()
	return m.DiskSpaceUsage() + m.MemTable.Size + uint64(l.tail.bytes)
}

// Resolved is the position up to which the log is complete.
func (l *Log) Resolved() model.Ts {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.resolved
}

// Changed is closed at the next append or resolve: readers waiting for
// more take it before they read.
func (l *Log) Changed() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.changed
}

// Append adds the rest of one committed transaction (schema changes
// first, each of a table at its own position, different tables' sharing
// them; then rows; AppendPart may have added rows before) and resolves
// the log up to its highest position. Positions must grow from one
// transaction to the next.
func (l *Log) Append(events []source.Event) error {
	defer l.balance()
	return l.append(events, true)
}

// AppendPart adds rows of a transaction still being received, at the
// position its commit will have. They stay invisible until a later
// Append or Resolve passes that position. They go to the store at once,
// with the older rows memory holds of their tables. An error of Append
// or AppendPart leaves the log unusable: its reader ends, and the next
// run of the reader fills a new log.
func (l *Log) AppendPart(rows []source.Event) error {
	return l.append(rows, false)
}

// ErasePart drops a table's rows that parts added at the position being
// filled, not resolved yet: rows of a transaction still being received
// that a TRUNCATE in it erased.
func (l *Log) ErasePart(table string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.seqTs
	if ts <= l.resolved {
		return fmt.Errorf("event log: no open transaction to erase rows of (resolved to %v)", l.resolved)
	}
	for i := range l.counts {
		if l.counts[i].table == table {
			// Its rows leave the summary; the others keep their numbers
			// (total_order then has a gap where they were).
			l.counts = slices.Delete(l.counts, i, i+1)
			break
		}
	}
	if !l.tail.erase(table, ts) {
		return nil
	}
	return l.db.DeleteRange(rowKey(table, ts, 0), rowKey(table, ts+1, 0), pebble.NoSync)
}

// TruncatePart drops the rows parts added at the position being filled,
// not resolved yet, from the keep-th on (0 drops them all): rows a
// rollback to a savepoint undid. The rows after them are numbered on
// from keep; with Options.Transactions each table's count in the
// transaction's summary loses the rows dropped.
func (l *Log) TruncatePart(keep int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.seqTs
	if ts <= l.resolved {
		return fmt.Errorf("event log: no open transaction to truncate (resolved to %v)", l.resolved)
	}
	if keep < 0 || keep > int(l.seq) {
		return fmt.Errorf("event log: truncating the transaction at %v to %d rows; it has %d", ts, keep, l.seq)
	}
	from, was := uint32(keep), l.seq
	if l.txns {
		// Each table's count less its rows dropped (its first row, below
		// keep when any row is left, stays).
		counts := l.counts[:0]
		for _, c := range l.counts {
			n, err := l.countStored(c.table, ts, from, was)
			if err != nil {
				return err
			}
			if c.n > n {
				c.n -= n
				counts = append(counts, c)
			}
		}
		l.counts = counts
	}
	for table := range l.parted {
		if err := l.db.DeleteRange(rowKey(table, ts, from), rowKey(table, ts+1, 0), pebble.NoSync); err != nil {
			return fmt.Errorf("event log: %w", err)
		}
		// Memory starts where the store now ends: the rows the commit
		// brings are numbered on from keep.
		if tt := l.tail.tables[table]; tt != nil && tt.rows.len() == 0 && tt.from.ts == ts && tt.from.seq > from {
			tt.from.seq = from
		}
	}
	l.seq = from
	return nil
}

func (l *Log) append(events []source.Event, resolve bool) error {
	if len(events) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("event log: closed")
	}
	if events[0].CommitTs <= l.resolved {
		return fmt.Errorf("event log: appending at %v, already resolved to %v", events[0].CommitTs, l.resolved)
	}
	var part []keptRow // a part's rows: to the store (storePart)
	for i := range events {
		e := &events[i]
		if e.Kind == source.KindDDL {
			if !resolve {
				return errors.New("event log: a schema change comes with its transaction's commit, not in a part")
			}
			l.ddls[e.Table] = append(l.ddls[e.Table], *e)
			continue
		}
		if e.Kind == source.KindMark {
			if !resolve {
				return errors.New("event log: a watermark comes with its transaction's commit, not in a part")
			}
			l.marks[e.Table] = append(l.marks[e.Table], *e)
			continue
		}
		if e.Kind == source.KindTxn {
			// The source's word on the transaction (its id there): taken
			// into its summary, not stored as a row.
			if !resolve {
				return errors.New("event log: a transaction's id comes with its commit, not in a part")
			}
			if e.Txn != nil {
				l.sourceID = e.Txn.SourceID
			}
			continue
		}
		// A transaction's rows, in parts or not, are numbered in order.
		if e.CommitTs != l.seqTs {
			l.seqTs, l.seq, l.counts, l.sourceID = e.CommitTs, 0, l.counts[:0], ""
			clear(l.parted)
		}
		if l.seq == txnSeq {
			return fmt.Errorf("event log: transaction at %v has more than %d rows", e.CommitTs, txnSeq-1)
		}
		// Kept as a read of the store would return it.
		k := source.Event{Kind: source.KindDML, Table: e.Table, CommitTs: e.CommitTs, Def: e.Def, SchemaVersion: e.SchemaVersion,
			TableVersion: e.TableVersion, Op: e.Op, Key: e.Key, New: e.New, Old: e.Old}
		if l.txns {
			k.TxnOrder, k.TxnTableOrder = l.seq+1, l.countRow(e)
		}
		if resolve {
			l.tail.keep(k, l.seq)
		} else {
			part = append(part, keptRow{seq: l.seq, e: k})
		}
		l.seq++
	}
	if part != nil {
		return l.storePart(part)
	}
	if resolve && l.seqTs == events[len(events)-1].CommitTs {
		l.summarize()
	}
	if err := l.spill(l.tail.overShare); err != nil {
		// The rows are kept in memory still: the log is whole, only over
		// its room until a spill succeeds.
		return err
	}
	if resolve {
		// Its highest, not its last: a transaction of schema changes
		// alone may end with one of a table at the first position after
		// another table's at the second.
		for i := range events {
			l.resolved = max(l.resolved, events[i].CommitTs)
		}
		l.wake()
	}
	return nil
}

// Hold stops a table at a position: reads of it end just below it (and
// below its first hold if it has one already). Only a new log (a new
// run of the reader) lets it go on.
func (l *Log) Hold(table string, at model.Ts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[table]; !ok || at < h {
		l.held[table] = at
	}
	l.wake()
}

// upToFor caps a read of a table at its hold.
func (l *Log) upToFor(table string, upTo model.Ts) model.Ts {
	if h, ok := l.held[table]; ok {
		return min(upTo, h-1)
	}
	return upTo
}

// summarize keeps the open transaction's summary, if the log keeps them
// and the transaction has rows. l.mu is held.
func (l *Log) summarize() {
	if !l.txns || len(l.counts) == 0 {
		return
	}
	l.tail.keep(l.summary(), txnSeq)
	l.counts, l.sourceID = l.counts[:0], ""
}

// Resolve moves the resolved position: nothing commits at or below ts
// later.
func (l *Log) Resolve(ts model.Ts) {
	defer l.balance() // after the lock: a summary may fill the room
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.txns && len(l.counts) > 0 && l.seqTs > l.resolved && l.seqTs <= ts && !l.closed {
		// A transaction whose rows all came in parts, resolved without
		// an Append: its summary now (a source that passes its id Appends
		// it instead). Kept in memory: a spill that fails leaves the
		// oldest rows there, over the room, and the next one writes them.
		l.summarize()
		_ = l.spill(l.tail.overShare)
	}
	if ts > l.resolved && !l.closed {
		l.resolved = ts
		l.wake()
	}
}

func (l *Log) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// DDLs returns a table's schema changes in (from, upTo], up to the
// resolved position.
func (l *Log) DDLs(table string, from, upTo model.Ts) []source.Event {
	l.mu.RLock()
	defer l.mu.RUnlock()
	upTo = l.upToFor(table, min(upTo, l.resolved))
	var out []source.Event
	for _, d := range l.ddls[table] {
		if d.CommitTs > from && d.CommitTs <= upTo {
			out = append(out, d)
		}
	}
	return out
}

// Trim drops rows at or below ts (the changefeed's checkpoint: no
// partition reads below it again).
func (l *Log) Trim(ts model.Ts) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ts <= l.trimmed || l.closed {
		return nil
	}
	// The store's rows first: a trim that fails there leaves memory as
	// it was (the store may have lost some of its rows at or below ts,
	// which no partition reads again).
	for t, tt := range l.tail.tables {
		if !tt.stored {
			continue
		}
		if err := l.db.DeleteRange(rowKey(t, 0, 0), rowKey(t, ts+1, 0), pebble.NoSync); err != nil {
			return err
		}
	}
	l.tail.trim(ts)
	for t, ms := range l.marks {
		i := 0
		for i < len(ms) && ms[i].CommitTs <= ts {
			i++
		}
		l.marks[t] = ms[i:]
	}
	l.trimmed = ts
	return nil
}

// quietLogger keeps pebble's informational logs out of the agent's.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
