package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot copies the rows that exist when a changefeed is
// created, consistent with the stream, in key-ordered chunks: Netflix's
// DBLog watermark algorithm, run by every partition for its own key range
// on whichever capture runs it (copy.go). For each chunk the partition's
// reader
//
//  1. writes a low watermark into the WAL (a logical decoding message
//     naming the chunk and its table),
//  2. selects the chunk (the next rows of its range in key order),
//  3. writes a high watermark;
//
// the changefeed's reader puts the watermarks into the event log, where
// every partition of the table meets them in order with the rows. The
// partition drops from its chunk every key that a row between the two
// watermarks changed (the stream carries the newer row), and at the high
// watermark returns the rest as inserts at its position. No row is
// missed: a row the chunk does not hold was changed in the stream after
// the chunk saw it. No row is applied twice over a newer one. How far the
// copy is rides in the partition's progress (model.CopyProgress).

// A chunk reads at most chunk-rows rows (defaultChunkRows unless the URI
// says), and about chunkBytes of them in memory: a partition's first
// chunk reads firstChunkRows, and the rows' size sets how many the next
// read. Larger chunks cost PostgreSQL fewer index descents and
// watermarks.
const (
	defaultChunkRows = 65536
	firstChunkRows   = 4096
	chunkBytes       = 16 << 20
)

// chunkRowsOf is the most rows a chunk of this source reads.
func chunkRowsOf(cfg Config) int {
	if cfg.ChunkRows > 0 {
		return cfg.ChunkRows
	}
	return defaultChunkRows
}

// firstChunkLimit is how many rows a partition's first chunk reads.
func firstChunkLimit(most int) int { return min(firstChunkRows, most) }

// nextChunkRows is how many rows the chunk after c reads.
func nextChunkRows(c *chunk, most int) int {
	if len(c.rows) == 0 || c.bytes == 0 {
		return firstChunkLimit(most)
	}
	perRow := max(c.bytes/len(c.rows), 1)
	return max(min(chunkBytes/perRow, most), min(1024, most))
}

// mark is a watermark's content.
type mark struct {
	Kind  string `json:"kind"` // low or high
	ID    string `json:"id"`
	Table string `json:"table"`
	// Snap is the read's snapshot (a high watermark's; visible.go), Racy
	// the positions of transactions before the low watermark it did not
	// see and Unsure that the puller could not tell (both set by the
	// puller).
	Snap   string     `json:"snap,omitempty"`
	Racy   []model.Ts `json:"racy,omitempty"`
	Unsure bool       `json:"unsure,omitempty"`
}

// chunk is a chunk in flight between its watermarks.
type chunk struct {
	id     string
	table  string
	snap   string           // the read's snapshot (txid_current_snapshot)
	regAt  model.Ts         // its reader's position when it went in flight
	def    *source.TableDef // the table's definition the rows were read under
	rows   []source.Event   // in key order
	last   string           // the last key read (encoded)
	full   bool             // as many rows as asked: the range may hold more
	limit  int              // rows asked
	bytes  int              // the rows' size in memory, about
	began  time.Time
	slot   bool // holds one of its node's chunk slots
	loaded bool // its rows are read (set under its reader's lock)

	open    bool            // the low watermark was met
	dropped map[string]bool // keys the stream changed in the window
	stale   bool            // a schema change (or TRUNCATE) in the window
}

// newChunk is a chunk of a table to read, under a fresh id.
func newChunk(table string, def *source.TableDef, limit int) *chunk {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &chunk{id: hex.EncodeToString(b[:]), table: table, def: def, limit: limit, dropped: map[string]bool{}, began: time.Now()}
}

// columnList is a table's columns, quoted, in order, for a SELECT.
func columnList(def *source.TableDef) string {
	cols := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		cols[i] = pgx.Identifier{col.Name}.Sanitize()
	}
	return strings.Join(cols, ", ")
}

// snapshotConn opens a connection chunks are read on. The simple protocol
// returns values in their text form, as pgoutput sends them.
func snapshotConn(ctx context.Context, cfg Config) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, err
	}
	pc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, explain(cfg, err)
	}
	return conn, nil
}

// execer runs a statement: a connection, or a transaction.
type execer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// writeMark writes a chunk's watermark (kind low or high) into the WAL, as
// a transactional logical decoding message of its own (or of the
// transaction it is written in).
func writeMark(ctx context.Context, conn execer, c *chunk, kind string) error {
	mk := mark{Kind: kind, ID: c.id, Table: c.table}
	if kind == "high" {
		mk.Snap = c.snap
	}
	b, _ := json.Marshal(mk)
	_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b))
	return err
}

// withWatermarks writes a chunk's low watermark, reads it, and writes its
// high watermark.
func withWatermarks(ctx context.Context, conn *pgx.Conn, cfg Config, c *chunk, read func() error) error {
	if err := writeMark(ctx, conn, c, "low"); err != nil {
		return fmt.Errorf("snapshot of %s: write the low watermark: %w", c.table, explain(cfg, err))
	}
	if err := read(); err != nil {
		return err
	}
	if err := writeMark(ctx, conn, c, "high"); err != nil {
		return fmt.Errorf("snapshot of %s: write the high watermark: %w", c.table, explain(cfg, err))
	}
	return nil
}

// load reads a chunk's rows from a query; keyIdx are the key columns'
// positions (none for a table without a key).
func (c *chunk) load(rows pgx.Rows, keyIdx []int) error {
	defer rows.Close()
	types := keyTypes(c.def)
	keyVals := make([]string, len(keyIdx))
	c.rows = make([]source.Event, 0, c.limit) // sized for the chunk: no copies as it grows
	var text []byte
	for rows.Next() {
		raw := rows.RawValues()
		// One string per row, its values slices of it: a chunk of 65,536
		// rows is then 65,536 allocations for the text, not one per value.
		text = text[:0]
		for _, v := range raw {
			text = append(text, v...)
		}
		all := string(text)
		vals := make([]source.Value, len(raw))
		c.bytes += 128 + 40*len(raw) + len(all) // the event, its values and their text
		off := 0
		for i, v := range raw {
			if v == nil {
				vals[i] = source.Null
				continue
			}
			vals[i] = source.Text(all[off : off+len(v)])
			off += len(v)
		}
		for i, j := range keyIdx {
			keyVals[i] = vals[j].Text
		}
		key, err := model.EncodeKeyValues(types, keyVals)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", c.table, err)
		}
		c.rows = append(c.rows, source.Event{Kind: source.KindDML, Table: c.table, Def: c.def, Op: source.OpInsert, Key: key, New: vals})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("snapshot of %s: %w", c.table, err)
	}
	if n := len(c.rows); n > 0 {
		c.last = c.rows[n-1].Key
	}
	c.full = len(c.rows) == c.limit
	return nil
}

// keyOrder is the key columns as a row the way keys are routed: integer
// columns by value, any other column by the bytes of its text (collation
// "C"), so the chunks of a partition are exactly its key range.
func keyOrder(def *source.TableDef) (exprs []string, keyIdx []int) {
	for _, k := range def.KeyNames() {
		j := def.Index(k)
		col := pgx.Identifier{k}.Sanitize()
		t := def.Columns[j].Type
		if i := strings.IndexByte(t, '('); i >= 0 {
			t = t[:i]
		}
		if !model.IsIntKeyType(t) {
			col += `::text COLLATE "C"`
		}
		exprs = append(exprs, col)
		keyIdx = append(keyIdx, j)
	}
	return exprs, keyIdx
}

// rangeQuery is the SELECT of a chunk: the next rows of a span in key
// order after the last key copied (or from the span's start).
func rangeQuery(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
	exprs, keyIdx := keyOrder(def)
	row := "(" + strings.Join(exprs, ", ") + ")"
	var conds []string
	var args []any
	bound := func(op, enc string) error {
		vals, err := model.DecodeKeyValues(span.Key, enc)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, err)
		}
		ph := make([]string, len(vals))
		for i, v := range vals {
			args = append(args, v)
			ph[i] = fmt.Sprintf("$%d", len(args))
		}
		conds = append(conds, fmt.Sprintf("%s %s (%s)", row, op, strings.Join(ph, ", ")))
		return nil
	}
	if after, ok := copied.After(); ok {
		if err := bound(">", after); err != nil {
			return "", nil, nil, err
		}
	} else if span.Start != "" {
		if err := bound(">=", span.Start); err != nil {
			return "", nil, nil, err
		}
	}
	if span.End != "" {
		if err := bound("<", span.End); err != nil {
			return "", nil, nil, err
		}
	}
	q := fmt.Sprintf("SELECT %s FROM %s", columnList(def), quoteQualified(span.Table))
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(exprs, ", "), limit)
	return q, args, keyIdx, nil
}

// observe notes the keys that rows met after the chunk's low watermark
// change: the stream carries the newer row.
func (c *chunk) observe(e *source.Event) {
	if c.open && e.Kind == source.KindDML {
		c.dropped[e.Key] = true
	}
}

// emit turns the chunk's rows the stream did not change into inserts at
// the high watermark's position, under the table's schema there (hw), which
// the caller has checked is the one they were read under.
func (c *chunk) emit(hw *source.Event) []source.Event {
	out := c.rows[:0] // in place: the chunk is done with them
	for _, e := range c.rows {
		if c.dropped[e.Key] {
			continue
		}
		e.Def, e.CommitTs, e.SchemaVersion, e.TableVersion = hw.Def, hw.CommitTs, hw.SchemaVersion, hw.TableVersion
		out = append(out, e)
	}
	return out // c.rows keeps its length: the next chunk's size comes from it
}

// snapshotStatus says what 'changefeed get' shows of the snapshot when
// the partitions' progress does not tell: empty when it does.
func snapshotStatus(cfg Config) string {
	if cfg.Snapshot == "never" {
		return "none (snapshot=never: only changes after creation)"
	}
	return ""
}

// copyPool holds the connections one node's partitions of a changefeed
// copy chunks on: at most copyConns at once, so a capture running many
// partitions does not open a connection for each.
type copyPool struct {
	cfg  Config
	mu   sync.Mutex
	idle []*pgx.Conn
	busy int
}

// copyConns bounds the chunks one node reads at once per changefeed.
const copyConns = 4

// tryGet returns a connection, or false when copyConns are in use.
func (p *copyPool) tryGet(ctx context.Context) (*pgx.Conn, bool, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy++
		p.mu.Unlock()
		return c, true, nil
	}
	if p.busy >= copyConns {
		p.mu.Unlock()
		return nil, false, nil
	}
	p.busy++
	p.mu.Unlock()
	c, err := snapshotConn(ctx, p.cfg)
	if err != nil {
		p.put(nil)
		return nil, false, err
	}
	return c, true, nil
}

// put gives a connection back; nil (or a broken one) frees its place.
func (p *copyPool) put(c *pgx.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	if c != nil && !c.IsClosed() && c.PgConn().TxStatus() == 'I' {
		p.idle = append(p.idle, c)
	} else if c != nil {
		_ = c.Close(context.Background())
	}
}

func (p *copyPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.Close(context.Background())
	}
}

// projectOnto keeps of the chunk's rows only the columns of def, an
// earlier version of the table with columns the chunk's definition has
// too (of the same type); false when def has another.
func (c *chunk) projectOnto(def *source.TableDef) bool {
	idx := make([]int, len(def.Columns))
	for i, col := range def.Columns {
		j := c.def.Index(col.Name)
		if j < 0 || c.def.Columns[j].Type != col.Type {
			return false
		}
		idx[i] = j
	}
	for k := range c.rows {
		vals := make([]source.Value, len(idx))
		for i, j := range idx {
			vals[i] = c.rows[k].New[j]
		}
		c.rows[k].New = vals
	}
	c.def = def
	return true
}

// columnNames lists a definition's columns for messages.
func columnNames(def *source.TableDef) string {
	if def == nil {
		return "none"
	}
	names := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		names[i] = col.Name
	}
	return strings.Join(names, ", ")
}

// chunkSlots bounds the chunks one node holds in memory per changefeed
// (read, their rows not gone out yet): about chunkBytes each.
type chunkSlots struct {
	mu   sync.Mutex
	used int
}

// maxChunksHeld is how many: 16 MiB each at most.
const maxChunksHeld = 8

func (s *chunkSlots) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= maxChunksHeld {
		return false
	}
	s.used++
	return true
}

func (s *chunkSlots) give() {
	s.mu.Lock()
	s.used--
	s.mu.Unlock()
}
