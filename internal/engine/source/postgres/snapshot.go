package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot copies the rows that exist when a changefeed is
// created, consistent with the stream, in key-ordered chunks: Netflix's
// DBLog watermark algorithm. For each chunk the reader
//
//  1. writes a low watermark into the WAL (a logical decoding message),
//  2. selects the chunk (the next rows of the table in key order),
//  3. writes a high watermark;
//
// then, reading the stream, it drops from the chunk every key that a
// transaction between the two watermarks changed (the stream carries the
// newer row), and at the high watermark emits the rest as inserts at
// that transaction's position. No row is missed: a row the chunk does not
// hold was changed in the stream after the chunk saw it. No row is applied
// twice over a newer one. The resume point carries the snapshot's
// progress, so a reader that starts elsewhere goes on at the next chunk.

// snapshotProgress is where the snapshot stands in a resume point.
type snapshotProgress struct {
	// Tables are still to copy, in order; the first is being copied.
	Tables []string `json:"tables"`
	// After is the first table's key (its key columns' text) copied up to.
	After []string `json:"after,omitempty"`
	// Rows counts the rows copied so far.
	Rows int64 `json:"rows"`
}

func (p *snapshotProgress) done() bool { return p == nil || len(p.Tables) == 0 }

// A chunk reads at most chunkRows rows, and about chunkBytes of them in
// memory: the first chunk of a table reads firstChunkRows, and the rows'
// size sets how many the next read. Larger chunks cost PostgreSQL fewer
// index descents and watermarks. chunksInFlight chunks are read ahead of
// the stream's watermarks: the fetcher reads the next chunks while the
// reader waits for one chunk's high watermark.
var chunkRows = 65536 // a variable: tests read many small chunks

const (
	firstChunkRows = 4096
	chunkBytes     = 16 << 20
	chunksInFlight = 3
)

// firstChunkLimit is how many rows a table's first chunk reads.
func firstChunkLimit() int { return min(firstChunkRows, chunkRows) }

// nextChunkRows is how many rows the chunk after c reads.
func nextChunkRows(c *chunk) int {
	if len(c.rows) == 0 || c.bytes == 0 {
		return firstChunkLimit()
	}
	perRow := max(c.bytes/len(c.rows), 1)
	return max(min(chunkBytes/perRow, chunkRows), min(1024, chunkRows))
}

// mark is a watermark's content.
type mark struct {
	Kind string `json:"kind"` // low or high
	ID   string `json:"id"`
}

// chunk is a chunk in flight between its watermarks. The fetcher fills
// rows, last and full, then closes loaded before it writes the high
// watermark; open and dropped belong to the reader.
type chunk struct {
	id     string
	table  string
	def    *source.TableDef // the table's definition the rows were read under
	rows   []source.Event   // in key order
	last   []string         // the chunk's last key
	full   bool             // as many rows as asked: the table may hold more
	limit  int              // rows asked
	bytes  int              // the rows' size in memory, about
	loaded chan struct{}

	open    bool            // the low watermark was seen
	dropped map[string]bool // keys the stream changed in the window
	emptied bool            // a TRUNCATE of the table in the window
}

// newChunk is a chunk of a table to read, under a fresh id.
func newChunk(table string, def *source.TableDef, limit int) *chunk {
	return &chunk{id: fmt.Sprint(time.Now().UnixNano()), table: table, def: def, limit: limit, loaded: make(chan struct{}), dropped: map[string]bool{}}
}

// columnList is a table's columns, quoted, in order, for a SELECT.
func columnList(def *source.TableDef) string {
	cols := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		cols[i] = pgx.Identifier{col.Name}.Sanitize()
	}
	return strings.Join(cols, ", ")
}

// chunkQueue holds the chunks in flight, oldest first. The fetcher adds a
// chunk before it writes its low watermark, so the reader knows it when
// the watermark arrives; the reader removes it once emitted.
type chunkQueue struct {
	mu     sync.Mutex
	chunks []*chunk
	freed  chan struct{}
}

func newChunkQueue() *chunkQueue { return &chunkQueue{freed: make(chan struct{}, 1)} }

func (q *chunkQueue) list() []*chunk {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]*chunk(nil), q.chunks...)
}

// add waits for a free slot, then adds c.
func (q *chunkQueue) add(ctx context.Context, c *chunk) error {
	for {
		q.mu.Lock()
		if len(q.chunks) < chunksInFlight {
			q.chunks = append(q.chunks, c)
			q.mu.Unlock()
			return nil
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.freed:
		}
	}
}

// pop removes the oldest chunk.
func (q *chunkQueue) pop() {
	q.mu.Lock()
	q.chunks = q.chunks[1:]
	q.mu.Unlock()
	select {
	case q.freed <- struct{}{}:
	default:
	}
}

// snapshotConn opens the connection chunks are read on. The simple
// protocol returns values in their text form, as pgoutput sends them.
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

// fetchChunks reads the snapshot's chunks from where p stands, in order,
// each between its watermarks, at most chunksInFlight ahead of the
// reader. It runs beside the reader, so reading a chunk overlaps with
// streaming the ones before it.
func fetchChunks(ctx context.Context, cfg Config, p *snapshotProgress, q *chunkQueue) error {
	conn, err := snapshotConn(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	tables, after := p.Tables, p.After
	limit := firstChunkLimit()
	for len(tables) > 0 {
		// The definition the SELECT reads under is the catalog's now; the
		// reader checks it is still the stream's at the high watermark.
		def, err := cat.tableDef(ctx, tables[0])
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", tables[0], explain(cfg, err))
		}
		if len(def.KeyNames()) == 0 {
			if err := copyKeyless(ctx, cfg, conn, tables[0], def, limit, q); err != nil {
				return err
			}
			tables, after, limit = tables[1:], nil, firstChunkLimit()
			continue
		}
		c := newChunk(tables[0], def, limit)
		if err := q.add(ctx, c); err != nil {
			return err
		}
		if err := readChunk(ctx, conn, cfg, c, after); err != nil {
			return err
		}
		if c.full {
			after, limit = c.last, nextChunkRows(c)
		} else {
			tables, after, limit = tables[1:], nil, firstChunkLimit()
		}
	}
	return nil
}

// copyKeyless copies a table without a primary key. Its rows cannot be
// told apart, so the window of a chunk (drop the rows the stream changed)
// cannot apply: the table is read under a SHARE lock instead, which holds
// off its writers while it is read, so no change to it commits between
// any of its chunks' watermarks. The chunks are read from one cursor in
// the locked transaction; the watermarks go through marks, another
// connection, so they commit while the lock is held.
func copyKeyless(ctx context.Context, cfg Config, marks *pgx.Conn, table string, def *source.TableDef, limit int, q *chunkQueue) error {
	conn, err := snapshotConn(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	fail := func(what string, err error) error {
		return fmt.Errorf("snapshot of %s (no primary key: read under a SHARE lock): %s: %w", table, what, explain(cfg, err))
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail("begin", err)
	}
	defer tx.Rollback(context.Background())
	cols := columnList(def)
	for _, stmt := range []string{
		// A writer holding the table for long makes the lock wait; the
		// reader then fails with this reason and tries again.
		`SET LOCAL lock_timeout = '30s'`,
		"LOCK TABLE " + quoteQualified(table) + " IN SHARE MODE",
		fmt.Sprintf("DECLARE cdcctl_snapshot NO SCROLL CURSOR FOR SELECT %s FROM %s", cols, quoteQualified(table)),
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fail(stmt, err)
		}
	}
	for {
		c := newChunk(table, def, limit)
		if err := q.add(ctx, c); err != nil {
			return err
		}
		err := withWatermarks(ctx, marks, cfg, c, func() error {
			rows, err := tx.Query(ctx, fmt.Sprintf("FETCH %d FROM cdcctl_snapshot", c.limit))
			if err != nil {
				return fail("fetch", err)
			}
			return c.load(rows, nil)
		})
		if err != nil {
			return err
		}
		if !c.full {
			return tx.Commit(ctx)
		}
		limit = nextChunkRows(c)
	}
}

// withWatermarks writes a chunk's low watermark, reads it, and writes
// its high watermark.
func withWatermarks(ctx context.Context, conn *pgx.Conn, cfg Config, c *chunk, read func() error) error {
	emit := func(kind string) error {
		b, _ := json.Marshal(mark{Kind: kind, ID: c.id})
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b))
		return err
	}
	if err := emit("low"); err != nil {
		return fmt.Errorf("snapshot of %s: write the low watermark: %w", c.table, explain(cfg, err))
	}
	if err := read(); err != nil {
		return err
	}
	close(c.loaded)
	if err := emit("high"); err != nil {
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
	c.rows = make([]source.Event, 0, c.limit)
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([]source.Value, len(raw))
		c.bytes += 128 + 40*len(raw) // the event and its values
		for i, v := range raw {
			if v == nil {
				vals[i] = source.Null
			} else {
				vals[i] = source.Text(string(v))
				c.bytes += len(v)
			}
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
		last := c.rows[n-1].New
		for _, j := range keyIdx {
			c.last = append(c.last, last[j].Text)
		}
	}
	c.full = len(c.rows) == c.limit
	return nil
}

// readChunk reads a chunk, the next rows of its table in key order after
// a key (nil: from the start), between its watermarks.
func readChunk(ctx context.Context, conn *pgx.Conn, cfg Config, c *chunk, after []string) error {
	def := c.def
	keys := def.KeyNames()
	cols := columnList(def)
	keyCols := make([]string, len(keys))
	keyIdx := make([]int, len(keys))
	for i, k := range keys {
		keyCols[i] = pgx.Identifier{k}.Sanitize()
		keyIdx[i] = def.Index(k)
	}
	q := fmt.Sprintf("SELECT %s FROM %s", cols, quoteQualified(c.table))
	var args []any
	if len(after) == len(keys) {
		ph := make([]string, len(keys))
		for i, v := range after {
			ph[i] = fmt.Sprintf("$%d", i+1)
			args = append(args, v)
		}
		q += fmt.Sprintf(" WHERE (%s) > (%s)", strings.Join(keyCols, ", "), strings.Join(ph, ", "))
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(keyCols, ", "), c.limit)
	return withWatermarks(ctx, conn, cfg, c, func() error {
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", c.table, explain(cfg, err))
		}
		return c.load(rows, keyIdx)
	})
}

// observe applies a committed transaction to the chunk in flight: its
// watermarks, and the keys it changed while the window is open. It
// returns true at the high watermark.
func (c *chunk) observe(tx *Txn) bool {
	high := false
	for _, m := range tx.Marks {
		var mk mark
		if json.Unmarshal(m, &mk) != nil || mk.ID != c.id {
			continue // another reader's chunk, or an earlier run's
		}
		switch mk.Kind {
		case "low":
			c.open = true
		case "high":
			high = true
		}
	}
	c.observeRows(tx.Events)
	return high
}

// observeRows notes the keys of the chunk's table that rows committed
// after its low watermark change: the stream carries the newer row.
func (c *chunk) observeRows(events []source.Event) {
	if !c.open || keyTypes(c.def) == model.NoKey {
		return // a keyless table is read under a lock: nothing changes it
	}
	for i := range events {
		e := &events[i]
		if e.Table != c.table {
			continue
		}
		if source.IsTruncate(e) {
			c.emptied = true // in the window: the stream has what is left
			continue
		}
		if e.Kind == source.KindDML {
			c.dropped[e.Key] = true
		}
	}
}

// emit turns the chunk's rows the stream did not change into inserts at
// the high watermark's position, under the table's current schema, which
// the caller has checked is the one they were read under.
func (c *chunk) emit(tx *Txn, st TableState) []source.Event {
	if c.emptied {
		return nil
	}
	out := make([]source.Event, 0, max(len(c.rows)-len(c.dropped), 0))
	for _, e := range c.rows {
		if c.dropped[e.Key] {
			continue
		}
		e.Def, e.CommitTs, e.SchemaVersion, e.TableVersion = st.Def, tx.Ts, st.Version, st.Since
		out = append(out, e)
	}
	return out
}

// advance moves the progress past a chunk that has been emitted (chunks
// are emitted in the order they were read).
func (p *snapshotProgress) advance(c *chunk, emitted int) *snapshotProgress {
	next := &snapshotProgress{Tables: p.Tables, After: p.After, Rows: p.Rows + int64(emitted)}
	if c.full {
		next.After = append([]string(nil), c.last...)
	} else {
		next.Tables, next.After = p.Tables[1:], nil
	}
	return next
}

// snapshotStatus describes the snapshot's progress for operators.
func snapshotStatus(cfg Config, persisted source.Position) string {
	if cfg.Snapshot == "never" {
		return "none (snapshot=never: only changes after creation)"
	}
	var p position
	if json.Unmarshal(persisted, &p) != nil {
		return ""
	}
	if p.Snapshot.done() {
		return "done"
	}
	at := "starting"
	if len(p.Snapshot.After) > 0 {
		at = "after key (" + strings.Join(p.Snapshot.After, ",") + ")"
	}
	return fmt.Sprintf("copying %s %s; %d of %d tables left; %d rows copied", p.Snapshot.Tables[0], at, len(p.Snapshot.Tables), len(cfg.Tables), p.Snapshot.Rows)
}
