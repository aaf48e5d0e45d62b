package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// OpenCopying implements source.Copier: a partition copies its share of
// the initial snapshot as it reads (source.CopyReader, with PostgreSQL's
// chunks), and once it is copied, the rows of partitions attached to its
// table later (attached.go). With snapshot=never it reads the log.
func (s *Source) OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (source.Reader, error) {
	if s.cfg.Snapshot == "never" {
		return s.LogSource.Open(span, from)
	}
	return s.LogSource.NewCopyReader(span, from, copied, source.CopyOptions{
		Chunks: s, ChunkRows: chunkRowsOf(s.cfg), Slots: &s.slots, Pace: s.pace, Whole: s.wholeTable, Log: s.log,
	}), nil
}

// ReadChunk implements source.ChunkReader on a connection of the node's
// pool; none (nil, nil) while the pool's are all in use.
func (s *Source) ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, ask source.ChunkAsk, register func(*source.Chunk) bool, loaded func(*source.Chunk)) (*source.Chunk, error) {
	conn, ok, err := s.pool.tryGet(ctx)
	if !ok {
		return nil, err
	}
	c, sorted, err := readRange(ctx, conn, s.cfg, span, copied, ask, register, loaded)
	if sorted != "" {
		if _, told := s.sortsTold.LoadOrStore(span.Table, true); !told {
			s.log.Warn("initial snapshot: "+sorted, "changefeed", s.cf, "table", span.Table)
		}
	}
	if err != nil {
		_ = conn.Close(context.Background())
		conn = nil
	}
	s.pool.put(conn)
	return c, err
}

// keyChangedWhileCopying says why a partition cut on a key of types
// copying.KeyTypes, copying by the key columns copying.KeyColumns, cannot
// copy the rest of its range now that the table's primary key is def's:
// when it encodes otherwise, or is of other columns (one int column
// moved to another encodes alike), its range and what it copied are in
// the old key's terms. "" when it can, or neither is known.
func keyChangedWhileCopying(table string, copying source.CopyingTable, def *source.TableDef) string {
	now := keyTypes(def)
	if copying.KeyTypes == "" || model.SameKeyEncoding(copying.KeyTypes, now) {
		if cols := model.KeyColumns(def.KeyNames()); copying.KeyColumns != "" && cols != copying.KeyColumns {
			return source.KeyMovedWhileCopying(table, copying.KeyColumns, cols)
		}
		return ""
	}
	spanKey := copying.KeyTypes
	return fmt.Sprintf("%s: its primary key changed (from a key of %s to (%s) of %s) while the initial snapshot copied it, so its partitions cannot copy the rest of their ranges; copy the table again under its new key: 'cdcctl changefeed pause', 'cdcctl changefeed update --copy-table %s', 'cdcctl changefeed resume' (docs/postgres.md)",
		table, spanKey, strings.Join(def.KeyNames(), ", "), now, table)
}

// readRange reads a chunk of a span, the next rows after what is copied,
// between its watermarks, under the table's definition in the catalog now
// (checked against the stream's at the high watermark). A full chunk
// that had to be sorted comes with what to tell the operator (sorted).
// A chunk that may grow (source.ChunkAsk) reads on after its first
// rows, in the same transaction and snapshot (readChunkRows).
func readRange(ctx context.Context, conn *pgx.Conn, cfg Config, span model.Span, copied model.CopyProgress, ask source.ChunkAsk, register func(*source.Chunk) bool, loaded func(*source.Chunk)) (c *source.Chunk, sorted string, err error) {
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	def, info, err := cat.tableDefKind(ctx, span.Table)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	if len(def.KeyNames()) == 0 {
		return nil, "", fmt.Errorf("snapshot of %s: the table has no primary key now; its changefeed was created with one", span.Table)
	}
	if why := keyChangedWhileCopying(span.Table, source.CopyingTable{KeyTypes: span.Key, KeyColumns: span.CopyKey(copied)}, def); why != "" {
		return nil, "", fmt.Errorf("snapshot of %s", why)
	}
	order, err := cat.byteOrder(ctx, span.Table, def)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	rel, err := relationRead(ctx, conn, span.Table, info.plain, def, copied)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	limit := ask.Rows
	q, args, keyIdx, err := rangeQuery(rel, def, order, false, span, copied, limit)
	if err != nil {
		return nil, "", err
	}
	how := orderOf(def, order, false)
	c = source.NewChunk(span.Table, def, ask.Rows)
	c.Expect = info.rows
	if !register(c) {
		return nil, "", nil
	}
	defer func() {
		if conn.PgConn().TxStatus() != 'I' { // after an error: a watermark's transaction, or the read's
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()
	if err := beginChunk(ctx, conn, cfg, c, how); err != nil {
		return nil, "", err
	}
	lead := false
	if timeLed(def) {
		if q, args, how, lead, err = timeLedQuery(ctx, conn, rel, def, order, span, copied, limit, q, args, how); err != nil {
			return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
	}
	if how == sortedOrder {
		ask.Most = ask.Rows // each query sorts the rest of the range: one is enough
	}
	readOn := func(n int) (string, []any, error) {
		q, args, _, err := rangeQuery(rel, def, order, lead, span, c.Through(copied), n)
		return q, args, err
	}
	if err := readChunkRows(ctx, conn, cfg, c, ask, q, args, readOn, keyIdx); err != nil {
		return nil, "", err
	}
	if c.Full && copied.Horizon == "" {
		// The range may hold more: where it ends in this snapshot, so that
		// the copy does not chase the rows written after it.
		if err := readHorizon(ctx, conn, cfg, c, rel, order, lead, span, copied); err != nil {
			return nil, "", err
		}
	}
	c.Within(span.Contains)
	// Loaded before the high watermark is written (ChunkReader); the
	// read's COMMIT, in the same round trip as that, only ends a
	// read-only transaction.
	loaded(c)
	if err := endChunk(ctx, conn, cfg, c); err != nil {
		return nil, "", err
	}
	if c.Full && how == sortedOrder {
		// The server says its encoding when the connection starts: not a
		// query for every full chunk of such a table (the warning is told
		// once).
		sorted = sortedWhy(span.Table, def, conn.PgConn().ParameterStatus("server_encoding") == "UTF8")
	}
	return c, sorted, nil
}

// readHorizon reads the span's last row after what is copied, on tx in
// the chunk's snapshot, into the chunk's horizon (Chunk.SetHorizon): the
// chunks after read up to it, as they read up to the span's end.
func readHorizon(ctx context.Context, tx querier, cfg Config, c *source.Chunk, rel string, order byteOrder, lead bool, span model.Span, copied model.CopyProgress) error {
	q, args, keyIdx, err := lastRowQuery(rel, c.Def, order, lead, span, copied)
	if err != nil {
		return err
	}
	last := source.NewChunk(c.Table, c.Def, 1)
	rows, err := tx.Query(ctx, q, args...)
	if err == nil {
		err = load(last, rows, keyIdx)
	}
	if err != nil {
		return fmt.Errorf("snapshot of %s: the last row of its range: %w", c.Table, explain(cfg, err))
	}
	c.SetHorizon(last.Last)
	return nil
}

// readChunkRows reads a chunk's rows on tx (its connection, in the read's
// transaction) by its query q, and where the chunk may grow, as many more
// as Chunk.Grow says by readOn's query of the rows after them (n at
// most): one snapshot, so one chunk between one pair of watermarks. (A
// cursor over the most rows, fetched in two parts, read a fifth slower
// than the two queries.)
func readChunkRows(ctx context.Context, tx querier, cfg Config, c *source.Chunk, ask source.ChunkAsk, q string, args []any, readOn func(n int) (string, []any, error), keyIdx []int) error {
	for n, first := ask.Rows, true; n > 0; n, first = c.Grow(ask), false {
		if !first {
			var err error
			if q, args, err = readOn(n); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", c.Table, explain(cfg, err))
		}
		if err := load(c, rows, keyIdx); err != nil {
			return err
		}
	}
	return nil
}

// timeLedQuery is the chunk's query of a table whose key begins with a
// date or a timestamp (q, args and how as made without it): read in
// time order from the key's index where, in the chunk's snapshot (tx),
// the times' text is in their order (timeOrdered), and then true; as it
// was otherwise.
func timeLedQuery(ctx context.Context, tx chunkQuerier, rel string, def *source.TableDef, order byteOrder, span model.Span, copied model.CopyProgress, limit int,
	q string, args []any, how readOrder) (string, []any, readOrder, bool, error) {
	ok, err := timeOrdered(ctx, tx, span.Table, def)
	if err != nil || !ok {
		return q, args, how, false, err
	}
	if q, args, _, err = rangeQuery(rel, def, order, true, span, copied, limit); err != nil {
		return "", nil, how, false, err
	}
	how = orderOf(def, order, true)
	return q, args, how, true, setOrder(ctx, tx, how)
}

// sortedWhy tells the operator that a table's chunks are sorted, and
// what would read them from an index: where the key's types allow one,
// in a UTF-8 database (in another, no collation orders text by its UTF-8
// bytes).
func sortedWhy(table string, def *source.TableDef, utf8 bool) string {
	why := fmt.Sprintf("%s is keyed by (%s), which partitions copy in the order of its text's bytes, and no index of it has that order: each chunk sorts the rest of its partition's range, so its copy slows as the table grows", table, strings.Join(def.KeyNames(), ", "))
	if timeLed(def) {
		return why + " (a key that begins with a date or a timestamp is read from its index where its text is in time order: DateStyle ISO, a timestamptz in a zone without offsets such as UTC, and no year before 1 or after 9999)"
	}
	if !indexable(def) || !utf8 {
		return why
	}
	cols := make([]string, 0, len(def.KeyNames()))
	for _, k := range def.KeyNames() {
		col := pgx.Identifier{k}.Sanitize()
		if textColumn(def.Columns[def.Index(k)]) {
			col += ` COLLATE "C"`
		}
		cols = append(cols, col)
	}
	return why + fmt.Sprintf("; an index in that order is read instead from the next chunk on: CREATE INDEX CONCURRENTLY ON %s (%s)", quoteQualified(table), strings.Join(cols, ", "))
}

// snapshotQuery is a chunk's read's first statement: its txid snapshot,
// and the planner's settings for reading in order how (setOrder).
func snapshotQuery(how readOrder) string {
	return "SELECT txid_current_snapshot()::text, " + orderSettings(how)
}

// orderSettings sets the planner for a read in order how (setOrder) as
// an expression: set_config(…, true) is SET LOCAL.
func orderSettings(how readOrder) string {
	set := []string{"jit"}
	switch how {
	case prefixOrder:
		set = append(set, "enable_sort")
	case indexOrder:
		set = append(set, "enable_sort", "enable_incremental_sort")
	}
	for i, name := range set {
		set[i] = "set_config('" + name + "', 'off', true)"
	}
	return "concat(" + strings.Join(set, ", ") + ")"
}

// querier runs a chunk's queries: its connection, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// chunkQuerier is what a chunk's read asks of its connection.
type chunkQuerier interface {
	querier
	rowQuerier
	execer
}

// setOrder sets the planner for a chunk read in order how (indexorder.go).
//
// Where an index gives the rows in key order, they come from it, not
// sorted (sorts are disabled, which makes the planner choose the index;
// were it to sort all the same, the rows would still be right, only
// slower): on a table without statistics (just loaded, not analyzed yet)
// the planner guesses that a bounded range holds a few hundred rows,
// reads all of it with a bitmap scan and sorts it, on disk, before the
// first row comes out; ten times the index scan, for every chunk of
// every partition but the last (TestChunksAreReadFromTheKeysIndex).
// Where it gives every column, an incremental sort is disabled too: where
// the primary key's index gives a prefix of the order (a tenant's uuid
// before text in ICU's collation) the planner would rather sort each
// tenant's rows than read the index in the bytes' order
// (TestAKeyWithAUUIDIsCopiedFromAnIndex); where it gives only a prefix,
// the incremental sort is what sorts the rest within each value of it.
// And no chunk is compiled by the JIT: a chunk is a scan of at most a
// few tens of thousands of rows, and a disabled sort's cost (10^10,
// before PostgreSQL 18) passes every JIT threshold (a chunk of 40 rows
// took 185 ms of inlining and optimising).
func setOrder(ctx context.Context, tx execer, how readOrder) error {
	_, err := tx.Exec(ctx, "SELECT "+orderSettings(how))
	return err
}
