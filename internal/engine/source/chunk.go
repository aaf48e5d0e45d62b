package source

// The initial snapshot of a database source copies the rows that exist
// when a changefeed is created, consistent with the stream, in key-ordered
// chunks: Netflix's DBLog watermark algorithm, run by every partition for
// its own key range on whichever capture runs it (CopyReader). For each
// chunk the partition
//
//  1. writes a low watermark into the database's log (PostgreSQL: a
//     logical decoding message; MySQL: a row of the signal table),
//  2. selects the chunk (the next rows of its range in key order),
//  3. writes a high watermark;
//
// the changefeed's reader puts the watermarks into the event log (KindMark
// events, their Statement a Mark), where every partition of the table
// meets them in order with the rows. The partition drops from its chunk
// every key that a row between the two watermarks changed (the stream
// carries the newer row), and at the high watermark returns the rest as
// inserts at its position. No row is missed: a row the chunk does not hold
// was changed in the stream after the chunk saw it. No row is applied
// twice over a newer one. How far the copy is rides in the partition's
// progress (model.CopyProgress). What is the database's own (writing a
// watermark, the SELECT of a range) is behind ChunkReader.

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A chunk reads at most the source's chunk rows (DefaultChunkRows unless
// its URI says), and about chunkBytes of them in memory: a partition's
// first chunk reads firstChunkRows and then, where its source can read on
// in the same snapshot, as many more as their size lets fit (ChunkAsk);
// the rows' size sets how many the next one reads. Larger chunks cost the
// database fewer index descents and watermarks.
const (
	DefaultChunkRows = 65536
	firstChunkRows   = 4096
	chunkBytes       = 16 << 20
)

// firstChunkLimit is how many rows a partition's first chunk reads.
func firstChunkLimit(most int) int { return min(firstChunkRows, most) }

// nextChunkRows is how many rows the chunk after c reads.
func nextChunkRows(c *Chunk, most int) int {
	if !c.sized() {
		return firstChunkLimit(most)
	}
	return rowsFitting(c.Bytes, c.rowsRead(), most)
}

// rowsRead is how many rows the chunk read, the ones Bytes counts.
func (c *Chunk) rowsRead() int {
	if c.Ordered {
		return c.Read // Bytes counts every row read, the span's or not
	}
	return len(c.Rows)
}

// sized says the chunk's rows tell their size: it read some.
func (c *Chunk) sized() bool { return c.rowsRead() > 0 && c.Bytes > 0 }

// rowsFitting is how many rows of the size of n rows of bytes in memory
// a chunk reads: about chunkBytes of them, at most most.
func rowsFitting(bytes, n, most int) int {
	perRow := max(bytes/n, 1)
	return max(min(chunkBytes/perRow, most), min(1024, most))
}

// ChunkAsk is how many rows a chunk reads (ChunkReader.ReadChunk).
type ChunkAsk struct {
	// Rows is how many it reads first, at most.
	Rows int
	// Most, above Rows, is for a chunk whose rows' size is not known yet
	// (a partition's first): once its first Rows tell it, a source that
	// can read on in the same snapshot reads as many more as a chunk of
	// them holds, up to Most in all (Chunk.Grow). Small tables are then
	// copied in one chunk, not two (a first of 4,096 rows and the rest:
	// twice the watermarks, round trips and transactions).
	Most int
}

// Grow is how many more rows a chunk asked for ask reads on, in the same
// snapshot as its first ask.Rows (read, and not yet cut to the span by
// Within): none unless ask lets it grow and that read filled it; then
// as many as a chunk of the rows' size holds, up to ask.Most in all.
// The chunk's Limit rises by them, so that Loaded tells whether the
// range may hold more; a second call grows it no further.
func (c *Chunk) Grow(ask ChunkAsk) int {
	n := len(c.Rows)
	if ask.Most <= ask.Rows || c.Limit != ask.Rows || n < ask.Rows || n == 0 || c.Bytes == 0 {
		return 0
	}
	more := rowsFitting(c.Bytes, n, ask.Most) - n
	if more <= 0 {
		return 0
	}
	c.Limit += more // the rows' array grows as they come (AddRow): a small table has few
	return more
}

// Mark is a watermark's content: the Statement of a KindMark event.
// A mark of kind MarkAttached is no chunk's: it tells the table's
// partitions that the relations in ID (the source's own names for them,
// space-separated) joined the table with rows its stream never carried,
// to be copied. The log keeps one mark of a table at a position.
type Mark struct {
	Kind  string `json:"kind"` // low, high, or MarkAttached
	ID    string `json:"id"`
	Table string `json:"table"`
	// Snap is the read's snapshot where the database needs it (a high
	// watermark's: PostgreSQL's txid snapshot); Racy the positions of
	// transactions before the low watermark the read did not see and
	// Unsure that the reader could not tell (both set by the database's
	// reader; MySQL's reads see exactly what is before their watermark).
	Snap   string     `json:"snap,omitempty"`
	Racy   []model.Ts `json:"racy,omitempty"`
	Unsure bool       `json:"unsure,omitempty"`
	// At is a MarkAgain's change: where the stream met it.
	At model.Ts `json:"at,omitempty"`
}

// MarkAttached is the kind of a mark that tells a table's partitions to
// copy a relation attached to it (Mark).
const MarkAttached = "attached"

// MarkAgain is the kind of a mark that tells a table's partitions to
// copy the table again (ID, its relation in the source's terms): a change
// at At rewrote its rows and the stream carried none of them (PostgreSQL:
// a column's type changed, its values with it). A source writes it once
// it has met the change; one started again before the change may write
// it twice, and a partition copies once per change
// (model.CopyProgress.CopyAgain).
const MarkAgain = "again"

// Chunk is a chunk in flight between its watermarks.
type Chunk struct {
	ID    string
	Table string
	Snap  string    // the read's snapshot, where the database has one (Mark.Snap)
	Def   *TableDef // the table's definition the rows were read under
	Rows  []Event   // in key order
	Last  string    // the last key read (encoded)
	Full  bool      // as many rows as asked (Limit): the range may hold more
	// Ordered says the rows were read in the source's index order, on
	// from the progress's Cursor, not in the keys' byte order: Last,
	// the last row read, is the next cursor (model.CopyProgress.Cursor),
	// and Read how many rows were read, the span's and others'.
	Ordered bool
	Read    int
	Order   string // the index order's name (model.CopyProgress.Order)
	Limit   int    // rows asked (raised by Grow)
	Bytes   int    // the rows' size in memory, about
	// Expect is how many rows the database's statistics say the table
	// has (0: unknown): a grown chunk's array is made for them at once.
	Expect int
	// KeyCols are the key's columns the rows were read and keyed by
	// (model.KeyColumns of Def as read; "" without a key).
	KeyCols string
	// Horizon is the last key the copy reads (the span's in byte order;
	// in an index's, of what it reads there), as of the read's snapshot,
	// where the source read it (SetHorizon): the copy's, once the chunk
	// is through (model.CopyProgress.Horizon).
	Horizon string

	regAt  model.Ts // its reader's position when it went in flight
	began  time.Time
	slot   bool // holds one of its node's chunk slots
	loaded bool // its rows are read (set under its reader's lock)

	text    []byte   // AddRow's buffer
	offs    []int    // where each value starts in it
	keyVals []string // and its key's values
	arena   Arena    // the rows' text and values

	open    bool            // the low watermark was met
	lowAt   model.Ts        // its position
	dropped map[string]bool // keys the stream changed in the window
	stale   bool            // a schema change (or TRUNCATE) in the window
}

// NewChunk is a chunk of a table to read, under a fresh id.
func NewChunk(table string, def *TableDef, limit int) *Chunk {
	var b [8]byte
	_, _ = rand.Read(b[:])
	c := &Chunk{ID: hex.EncodeToString(b[:]), Table: table, Def: def, Limit: limit, dropped: map[string]bool{}, began: time.Now()}
	if def != nil {
		c.KeyCols = model.KeyColumns(def.KeyNames())
	}
	return c
}

// AddRow appends a row read in the database's text form: its values'
// bytes in column order (nil is NULL), keyIdx the key columns' positions
// (none for a table without a key) and types the key's column types as
// routing encodes them. The row's text and its routing key are one
// string, its values and the key slices of it, cut from the chunk's
// arena: a chunk of 65,536 rows makes a few allocations for them, not one
// per row (with one per row they were a third of a MySQL snapshot's
// read). The event is written in place, field by field, into the rows
// the chunk has room for (BenchmarkChunkAddRow), which grow as they come
// (room) up to its Limit.
func (c *Chunk) AddRow(raw [][]byte, keyIdx []int, types string) error {
	c.text, c.offs = c.text[:0], c.offs[:0]
	for _, v := range raw {
		c.offs = append(c.offs, len(c.text))
		c.text = append(c.text, v...)
	}
	off := len(c.text)
	c.keyVals = c.keyVals[:0]
	for _, j := range keyIdx {
		// In the key's order, which need not be the columns': only to
		// encode the key, from the bytes just appended (the key is
		// appended after them, never over them).
		c.keyVals = append(c.keyVals, unsafe.String(unsafe.SliceData(c.text[c.offs[j]:]), len(raw[j])))
	}
	var err error
	if c.text, err = model.AppendKeyValues(c.text, types, c.keyVals); err != nil {
		return err
	}
	all := c.arena.String(c.text)
	vals := c.arena.Values(len(raw))
	c.Bytes += 128 + 40*len(raw) + off // the event, its values and their text
	off = 0
	for i, v := range raw {
		if v == nil {
			vals[i] = Null
			continue
		}
		vals[i].Text = all[off : off+len(v)]
		off += len(v)
	}
	n := len(c.Rows)
	if n == cap(c.Rows) {
		// Made here, not by append, whose growth would pass the Limit.
		rows := make([]Event, n, c.room(n))
		copy(rows, c.Rows)
		c.Rows = rows
	}
	c.Rows = c.Rows[:n+1]
	e := &c.Rows[n]
	e.Kind, e.Table, e.Def, e.Op, e.Key, e.New = KindDML, c.Table, c.Def, OpInsert, all[off:], vals
	return nil
}

// room is how many rows a chunk's array of n full rows makes room for,
// up to the rows asked: a chunk grown after its first read (Grow) is made
// with room for those only, and reading on may find few more (with room
// for the most it may read, most of a small table's copy was clearing
// memory it never used). Where the table's statistics say how many rows
// it has, room for them with an eighth more (a table that has grown
// since they were taken), once (the table's rows, not the span's: a
// small span of a large table is made room for the rows asked);
// otherwise four times as many. Not
// doubled: each step copies the events before, whose pointers the
// collector's write barrier sees one by one (a first chunk of 4,096 rows
// grown to 42,000 copied 61,000 events doubling, a third of its build).
func (c *Chunk) room(n int) int {
	want := 4 * n
	if c.Expect > n {
		want = c.Expect + c.Expect/8
	}
	return max(min(want, c.Limit), n+1)
}

// Forget drops what a read of the chunk added, and sets its limit back
// to limit: the chunk is read again another way, in the same window.
func (c *Chunk) Forget(limit int) {
	clear(c.Rows)
	c.Rows = c.Rows[:0]
	c.Last, c.Full, c.Read, c.Bytes, c.Horizon, c.Limit = "", false, 0, 0, "", limit
}

// Loaded ends a chunk's read: its last key, how many rows it read and
// whether the range may hold more.
func (c *Chunk) Loaded() {
	if n := len(c.Rows); n > 0 {
		c.Last = c.Rows[n-1].Key
	}
	c.Read = len(c.Rows)
	c.Full = len(c.Rows) == c.Limit
}

// Through is the progress p once the chunk, a full one, is copied.
func (c *Chunk) Through(p model.CopyProgress) model.CopyProgress {
	if c.Ordered {
		p = p.ReadThrough(c.Last, c.Order, c.Read)
	} else {
		p = p.CopiedThrough(c.Last)
	}
	if c.Horizon != "" {
		p.Horizon = c.Horizon
	}
	return p
}

// SetHorizon records the last key the copy reads, in the order it reads
// (the span's last key in byte order, or in the source's index order the
// last of what the copy reads there), as of the snapshot the chunk was
// read in (its source's query of it after a full read): the copy stops
// there (model.CopyProgress.Horizon). A chunk whose last row is it ends
// the range.
func (c *Chunk) SetHorizon(last string) {
	if last == "" {
		return
	}
	c.Horizon = last
	if c.Last == last {
		c.Full = false
	}
}

// Within keeps of the chunk's rows those of the span: a database's query
// reads the span only; routing decides, to be sure.
func (c *Chunk) Within(contains func(key string) bool) {
	// Nothing is moved before the first row left out (in the common case
	// there is none): moving an event writes its pointers again.
	kept := len(c.Rows)
	for i := range c.Rows {
		if !contains(c.Rows[i].Key) {
			kept = i
			break
		}
	}
	for i := kept + 1; i < len(c.Rows); i++ {
		if contains(c.Rows[i].Key) {
			c.Rows[kept] = c.Rows[i]
			kept++
		}
	}
	c.Rows = c.Rows[:kept]
}

// observe notes the keys that rows met after the chunk's low watermark
// change: the stream carries the newer row.
func (c *Chunk) observe(e *Event) {
	if c.open && e.Kind == KindDML {
		c.dropped[e.Key] = true
	}
}

// emit turns the chunk's rows the stream did not change into inserts at
// the high watermark's position, under the table's schema there (hw),
// which the caller has checked is the one they were read under.
func (c *Chunk) emit(hw *Event) []Event {
	// In place (the chunk is done with them), each event written where
	// it is, and moved only over one dropped before it.
	n := 0
	for i := range c.Rows {
		e := &c.Rows[i]
		if len(c.dropped) > 0 && c.dropped[e.Key] {
			continue
		}
		if e.Def != hw.Def {
			e.Def = hw.Def
		}
		e.CommitTs, e.SchemaVersion, e.TableVersion = hw.CommitTs, hw.SchemaVersion, hw.TableVersion
		if n != i {
			c.Rows[n] = *e
		}
		n++
	}
	return c.Rows[:n] // c.Rows keeps its length: the next chunk's size comes from it
}

// projectOnto keeps of the chunk's rows only the columns of def, an
// earlier version of the table with columns the chunk's definition has
// too (of the same type); false when def has another.
func (c *Chunk) projectOnto(def *TableDef) bool {
	if def == nil {
		return false
	}
	idx := make([]int, len(def.Columns))
	for i, col := range def.Columns {
		j := c.Def.Index(col.Name)
		if j < 0 || c.Def.Columns[j].Type != col.Type {
			return false
		}
		idx[i] = j
	}
	for k := range c.Rows {
		vals := make([]Value, len(idx))
		for i, j := range idx {
			vals[i] = c.Rows[k].New[j]
		}
		c.Rows[k].New = vals
	}
	c.Def = def
	return true
}

// SameColumns says two definitions have the same columns, in order, of
// the same types and key positions (nullability aside: PostgreSQL's
// stream does not carry it).
func SameColumns(a, b *TableDef) bool {
	if a == nil || b == nil || len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Type != y.Type || x.KeyPos != y.KeyPos {
			return false
		}
	}
	return true
}

// ColumnNames lists a definition's columns for messages.
func ColumnNames(def *TableDef) string {
	if def == nil {
		return "none"
	}
	names := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		names[i] = col.Name
	}
	return strings.Join(names, ", ")
}

// SnapshotStatus says what 'changefeed get' shows of a database
// source's snapshot when the partitions' progress does not tell: empty
// when it does.
func SnapshotStatus(snapshot string) string {
	if snapshot == "never" {
		return "none (snapshot=never: only changes after creation)"
	}
	return ""
}

// ChunkSlots bounds the chunks one node holds in memory per changefeed
// (read, their rows not gone out yet): about chunkBytes each. A source
// gives all its copy readers one.
type ChunkSlots struct {
	mu   sync.Mutex
	used int
}

// maxChunksHeld is how many: 16 MiB each at most.
const maxChunksHeld = 8

func (s *ChunkSlots) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= maxChunksHeld {
		return false
	}
	s.used++
	return true
}

func (s *ChunkSlots) give() {
	s.mu.Lock()
	s.used--
	s.mu.Unlock()
}
