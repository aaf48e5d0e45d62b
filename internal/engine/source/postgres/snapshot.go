package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot (source/chunk.go: the watermark algorithm every
// database source shares) writes PostgreSQL's watermarks as logical
// decoding messages and reads a chunk in a REPEATABLE READ transaction
// whose snapshot the high watermark carries (visible.go).

// chunkRowsOf is the most rows a chunk of this source reads.
func chunkRowsOf(cfg Config) int {
	if cfg.ChunkRows > 0 {
		return cfg.ChunkRows
	}
	return source.DefaultChunkRows
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
	if err := unlimit(ctx, conn); err != nil {
		_ = conn.Close(context.Background())
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
func writeMark(ctx context.Context, conn execer, c *source.Chunk, kind string) error {
	_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, markText(c, kind))
	return err
}

// markText is the content of a chunk's watermark of kind low or high.
func markText(c *source.Chunk, kind string) string {
	mk := source.Mark{Kind: kind, ID: c.ID, Table: c.Table}
	if kind == "high" {
		mk.Snap = c.Snap
	}
	b, _ := json.Marshal(mk)
	return string(b)
}

// markStatement is the statement that writes a chunk's watermark in a
// transaction of its own, its values written into it (for a query of
// several statements, which takes no parameters).
func markStatement(conn *pgconn.PgConn, c *source.Chunk, kind string) (string, error) {
	text, err := conn.EscapeString(markText(c, kind))
	if err != nil {
		return "", err
	}
	return "BEGIN; SELECT pg_logical_emit_message(true, '" + markPrefix + "', '" + text + "'); COMMIT", nil
}

// beginChunk writes a chunk's low watermark and begins its read, in one
// round trip (a small table's chunk spent 1.5-4 ms in its round trips
// beside 10 ms reading its rows): the watermark committed in a
// transaction of its own,
// then the read's REPEATABLE READ transaction, whose snapshot (c.Snap)
// and planner settings (how) its first statement takes. The statements
// run in order as they would one by one.
func beginChunk(ctx context.Context, conn *pgx.Conn, cfg Config, c *source.Chunk, how readOrder) error {
	low, err := markStatement(conn.PgConn(), c, "low")
	if err != nil {
		return fmt.Errorf("snapshot of %s: write the low watermark: %w", c.Table, err)
	}
	res, err := conn.PgConn().Exec(ctx, low+"; BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "+snapshotQuery(how)).ReadAll()
	switch {
	case err != nil && failedAt(res) < 3: // the watermark's BEGIN, SELECT, COMMIT
		return fmt.Errorf("snapshot of %s: write the low watermark: %w", c.Table, explain(cfg, err))
	case err != nil:
		return fmt.Errorf("snapshot of %s: begin the read: %w", c.Table, explain(cfg, err))
	case len(res) != 5 || len(res[4].Rows) != 1:
		return fmt.Errorf("snapshot of %s: begin the read: %d results, not the five of its statements", c.Table, len(res))
	case !commitOK(res[2]):
		// Not in the WAL: the stream would meet the chunk's high
		// watermark without its low one.
		return fmt.Errorf("snapshot of %s: write the low watermark: the server answered %q to its COMMIT", c.Table, res[2].CommandTag.String())
	}
	c.Snap = string(res[4].Rows[0][0])
	return nil
}

// failedAt is which statement of a query of several failed: the first
// whose result has the error (pgconn keeps the failed one's), or the one
// after the results.
func failedAt(res []*pgconn.Result) int {
	for i, r := range res {
		if r.Err != nil {
			return i
		}
	}
	return len(res)
}

// endChunk ends a chunk's read (begun by beginChunk) and writes its high
// watermark, in one round trip.
func endChunk(ctx context.Context, conn *pgx.Conn, cfg Config, c *source.Chunk) error {
	high, err := markStatement(conn.PgConn(), c, "high")
	if err != nil {
		return fmt.Errorf("snapshot of %s: write the high watermark: %w", c.Table, err)
	}
	res, err := conn.PgConn().Exec(ctx, "COMMIT; "+high).ReadAll()
	switch {
	case err != nil && failedAt(res) == 0:
		return fmt.Errorf("snapshot of %s: end the read: %w", c.Table, explain(cfg, err))
	case err != nil:
		return fmt.Errorf("snapshot of %s: write the high watermark: %w", c.Table, explain(cfg, err))
	case len(res) != 4 || !commitOK(res[0]) || !commitOK(res[3]):
		// The read's transaction had failed unseen, or the watermark's
		// did: the chunk is read again (a high watermark already in the
		// WAL is then no chunk's in flight).
		return fmt.Errorf("snapshot of %s: end the read: %d results, not the four of its statements, or a COMMIT answered otherwise", c.Table, len(res))
	}
	return nil
}

// commitOK says a COMMIT committed: the server answers ROLLBACK to the
// COMMIT of a transaction that had failed.
func commitOK(r *pgconn.Result) bool { return r.CommandTag.String() == "COMMIT" }

// load reads a chunk's rows from a query; keyIdx are the key columns'
// positions (none for a table without a key).
func load(c *source.Chunk, rows pgx.Rows, keyIdx []int) error {
	defer rows.Close()
	types := keyTypes(c.Def)
	if c.Rows == nil {
		c.Rows = make([]source.Event, 0, c.Limit) // sized for the chunk (a grown one's array grows on: Chunk.AddRow)
	}
	for rows.Next() {
		if err := c.AddRow(rows.RawValues(), keyIdx, types); err != nil {
			return fmt.Errorf("snapshot of %s: %w", c.Table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("snapshot of %s: %w", c.Table, err)
	}
	c.Loaded()
	return nil
}

// keyOrder is the key columns as a row the way keys are routed: integer
// columns by value, any other column by the bytes of its text in UTF-8
// (outputBytes), so the chunks of a partition are exactly its key range. A column
// of text that an index orders so (byteOrder, textkey.go) is named in
// that index's collation, so that the index serves the order.
func keyOrder(def *source.TableDef, order byteOrder) (exprs []string, keyIdx []int) {
	for _, k := range def.KeyNames() {
		j := def.Index(k)
		col := pgx.Identifier{k}.Sanitize()
		if clause, ok := order[k]; ok {
			col += clause
		} else if !intColumn(def.Columns[j]) {
			col = outputBytes(col)
		}
		exprs = append(exprs, col)
		keyIdx = append(keyIdx, j)
	}
	return exprs, keyIdx
}

// outputText is a column's value as its type writes it, the text pgoutput
// sends and keys are routed by. Not its cast to text, which for some
// types writes other text: a boolean's is 'true' (its output 't'), an
// inet host's has '/32' ('10.0.0.1/32'), a char(n)'s loses its padding.
// Chunks read in the cast's order read keys again after the last one
// copied (a bool key's copy never ended) or missed the keys at a
// partition's bound.
func outputText(col string) string { return "format('%s', " + col + ")" }

// outputBytes is a column's output text as the bytes a key is routed by:
// in UTF-8, the encoding the reader receives it in. Not the text under
// COLLATE "C", which orders the bytes of the database's encoding: in
// WIN1252 or EUC_JP another order than UTF-8's, and the keys of a
// partition's bound were copied by neither side (or both). Its bounds are
// bytes too (keyParam): a key the database's encoding cannot write (an
// operator's split key) bounds the rows all the same.
func outputBytes(col string) string { return "convert_to(" + outputText(col) + ", 'UTF8')" }

// keyParam is the placeholder of the i-th key value v of a chunk's bound,
// the next of args: bytes where the key column is compared as outputBytes.
func keyParam(def *source.TableDef, order byteOrder, i int, v string, args *[]any) string {
	k := def.KeyNames()[i]
	if _, ok := order[k]; !ok && !intColumn(def.Columns[def.Index(k)]) {
		*args = append(*args, []byte(v))
		return fmt.Sprintf("$%d::bytea", len(*args))
	}
	*args = append(*args, v)
	return fmt.Sprintf("$%d", len(*args))
}

// intColumn says a key column is an integer, routed and ordered by its
// value.
func intColumn(col source.ColumnDef) bool {
	t := col.Type
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = t[:i]
	}
	return model.IsIntKeyType(t)
}

// rangeQuery is the SELECT of a chunk: the next rows of a span in key
// order after the last key copied (or from the span's start).
// order says how an index orders the key's text columns by their bytes;
// timeLead that the key's first column, a date or timestamp, is written
// in its own order in the chunk's snapshot (timeOrdered).
//
// from is the relation read: the span's table (fromTable: ONLY a plain
// table), or the relation attached to it that the copy reads now
// (CopyProgress.Only).
func rangeQuery(from string, def *source.TableDef, order byteOrder, timeLead bool, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
	return spanQuery(from, def, order, timeLead, span, copied, limit, "")
}

// lastRowQuery is the query of the last row rangeQuery would read, read
// backwards in the same order: in a full chunk's snapshot, its key is
// the copy's horizon (model.CopyProgress.Horizon).
func lastRowQuery(from string, def *source.TableDef, order byteOrder, timeLead bool, span model.Span, copied model.CopyProgress) (string, []any, []int, error) {
	return spanQuery(from, def, order, timeLead, span, copied, 1, " DESC")
}

// spanQuery is rangeQuery in direction dir ("" or " DESC").
func spanQuery(from string, def *source.TableDef, order byteOrder, timeLead bool, span model.Span, copied model.CopyProgress, limit int, dir string) (string, []any, []int, error) {
	prefix := nativePrefix(def, order, timeLead)
	for _, c := range prefix {
		if c.cast != "" {
			return nativeRangeQuery(from, def, order, prefix, span, copied, limit, dir)
		}
	}
	return textOrderQuery(from, def, order, span, copied, limit, dir)
}

// textOrderQuery is a chunk's query in routing order (keyOrder): what a
// key is read with whose first columns are integers or text an index
// orders by its bytes (the index serves the query's bounds as they are),
// or neither (sorted).
func textOrderQuery(from string, def *source.TableDef, order byteOrder, span model.Span, copied model.CopyProgress, limit int, dir string) (string, []any, []int, error) {
	exprs, keyIdx := keyOrder(def, order)
	var args []any
	literal := func(i int, v string) (string, error) {
		return keyParam(def, order, i, v, &args), nil
	}
	var q string
	var err error
	if dir == "" {
		q, err = source.RangeQuery(columnList(def), from, exprs, span, copied, limit, literal)
	} else {
		q, err = source.LastRowQuery(columnList(def), from, exprs, span, copied, literal)
	}
	return q, args, keyIdx, err
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
