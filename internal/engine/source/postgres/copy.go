package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// OpenCopying implements source.Copier: a partition whose share of the
// initial snapshot is not done copies it as it reads (source.CopyReader,
// with PostgreSQL's chunks); any other reads the log.
func (s *Source) OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (source.Reader, error) {
	if s.cfg.Snapshot == "never" || copied.Done {
		return s.LogSource.Open(span, from)
	}
	return s.LogSource.NewCopyReader(span, from, copied, source.CopyOptions{
		Chunks: s, ChunkRows: chunkRowsOf(s.cfg), Slots: &s.slots, Whole: s.wholeTable, Log: s.log,
	}), nil
}

// ReadChunk implements source.ChunkReader on a connection of the node's
// pool; none (nil, nil) while the pool's are all in use.
func (s *Source) ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, limit int, register func(*source.Chunk) bool, loaded func(*source.Chunk)) (*source.Chunk, error) {
	conn, ok, err := s.pool.tryGet(ctx)
	if !ok {
		return nil, err
	}
	c, sorted, err := readRange(ctx, conn, s.cfg, span, copied, limit, register, loaded)
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

// readRange reads a chunk of a span, the next rows after what is copied,
// between its watermarks, under the table's definition in the catalog now
// (checked against the stream's at the high watermark). A full chunk
// that had to be sorted comes with what to tell the operator (sorted).
func readRange(ctx context.Context, conn *pgx.Conn, cfg Config, span model.Span, copied model.CopyProgress, limit int, register func(*source.Chunk) bool, loaded func(*source.Chunk)) (c *source.Chunk, sorted string, err error) {
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	def, err := cat.tableDef(ctx, span.Table)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	if len(def.KeyNames()) == 0 {
		return nil, "", fmt.Errorf("snapshot of %s: the table has no primary key now; its changefeed was created with one", span.Table)
	}
	order, err := cat.byteOrder(ctx, span.Table, def)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	q, args, keyIdx, err := rangeQuery(def, order, span, copied, limit)
	if err != nil {
		return nil, "", err
	}
	c = source.NewChunk(span.Table, def, limit)
	if !register(c) {
		return nil, "", nil
	}
	err = withWatermarks(ctx, conn, cfg, c, func() error {
		tx, err := chunkTx(ctx, conn, &c.Snap, indexOrdered(def, order))
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit, a no-op
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		if err := load(c, rows, keyIdx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		c.Within(span.Contains)
		loaded(c)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if c.Full && !indexOrdered(def, order) {
		var encoding string
		_ = conn.QueryRow(ctx, `SELECT current_setting('server_encoding')`).Scan(&encoding)
		sorted = sortedWhy(span.Table, def, encoding == "UTF8")
	}
	return c, sorted, nil
}

// sortedWhy tells the operator that a table's chunks are sorted, and
// what would read them from an index: where the key's types allow one,
// in a UTF-8 database (in another, no collation orders text by its UTF-8
// bytes).
func sortedWhy(table string, def *source.TableDef, utf8 bool) string {
	why := fmt.Sprintf("%s is keyed by (%s), which partitions copy in the order of its text's bytes, and no index of it has that order: each chunk sorts the rest of its partition's range, so its copy slows as the table grows", table, strings.Join(def.KeyNames(), ", "))
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

// chunkTx begins a chunk's read: one REPEATABLE READ snapshot for the
// rows and for what it saw (visible.go), its txid snapshot into snap.
//
// Where an index gives the rows in key order (indexOrdered: integer and
// uuid key columns, uuidkey.go, and text an index orders by its bytes,
// textkey.go), they come from it, not sorted (sorts are disabled, which
// makes the planner choose the index; were it to sort all the same, the
// rows would still be right, only slower): on a table without
// statistics (just loaded, not analyzed yet) the planner guesses that a
// bounded range holds a few hundred rows, reads all of it with a bitmap
// scan and sorts it, on disk, before the first row comes out; ten times
// the index scan, for every chunk of every partition but the last
// (TestChunksAreReadFromTheKeysIndex). An incremental sort is disabled
// too: where the primary key's index gives a prefix of the order (a
// tenant's uuid before text in ICU's collation) the planner would rather
// sort each tenant's rows than read the index in the bytes' order
// (TestAKeyWithAUUIDIsCopiedFromAnIndex). Other keys are ordered by their
// text's bytes, which their index does not give: those are sorted. And no chunk
// is compiled by the JIT: a chunk is a scan of at most a few tens of
// thousands of rows, and a disabled sort's cost (10^10, before PostgreSQL 18) passes every
// JIT threshold (a chunk of 40 rows took 185 ms of inlining and
// optimising).
func chunkTx(ctx context.Context, conn *pgx.Conn, snap *string, indexOrder bool) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	if err := tx.QueryRow(ctx, `SELECT txid_current_snapshot()::text`).Scan(snap); err != nil {
		_ = tx.Rollback(context.Background())
		return nil, err
	}
	set := `SET LOCAL jit = off`
	if indexOrder {
		set += `; SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off`
	}
	if _, err := tx.Exec(ctx, set); err != nil {
		_ = tx.Rollback(context.Background())
		return nil, err
	}
	return tx, nil
}

// indexOrdered says a chunk of the table is read in its key index's
// order: every column of its key is an integer, ordered by its value, a
// uuid, ordered as its text (uuidkey.go), or text an index orders by its
// bytes (byteOrder): that index orders the key as routing does.
func indexOrdered(def *source.TableDef, order byteOrder) bool {
	for _, k := range def.KeyNames() {
		col := def.Columns[def.Index(k)]
		if !intColumn(col) && !uuidColumn(col) && !order.has(k) {
			return false
		}
	}
	return true
}
