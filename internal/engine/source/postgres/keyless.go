package postgres

// A table without a primary key: copied whole, from one snapshot, all its
// rows at one position.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// startWhole starts the copy of a table without a key: its snapshot and
// first chunk, between watermarks.
func (r *copyReader) startWhole() {
	ctx, cancel := context.WithTimeout(r.ctx, chunkTimeout)
	defer cancel()
	r.mu.Lock()
	limit := r.limit
	r.mu.Unlock()
	c, lc, err := wholeTable(ctx, r.s.cfg, r.span.Table, limit)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(err)
		return
	}
	c.loaded = true
	r.chunks, r.whole = []*chunk{c}, lc
}

// fetchWhole reads the next rows of a table without a key from its
// snapshot, to go out at the same position as the first. A failure there
// cannot resume (the rows cannot say which went out): the copy starts
// over, and the rows that went out are written twice.
func (r *copyReader) fetchWhole() {
	ctx, cancel := context.WithTimeout(context.Background(), chunkTimeout)
	defer cancel()
	r.mu.Lock()
	lc, limit := r.whole, r.limit
	r.mu.Unlock()
	c := newChunk(r.span.Table, lc.def, limit)
	err := lc.fetch(ctx, c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(fmt.Errorf("%w; the rows of it already written will be written again", err))
		return
	}
	for i := range c.rows {
		e := &c.rows[i]
		e.Def, e.CommitTs, e.SchemaVersion, e.TableVersion = lc.at.Def, lc.at.CommitTs, lc.at.SchemaVersion, lc.at.TableVersion
	}
	r.next.Rows += int64(len(c.rows))
	r.out, r.limit = c.rows, nextChunkRows(c, chunkRowsOf(r.s.cfg))
	if !c.full {
		r.next.Done = true
		lc.emitting = false
		lc.close()
		r.whole = nil
		if len(r.out) == 0 {
			r.copied = r.next
		}
	}
}

// keylessCopy is the copy of a table without a primary key. Its rows
// cannot be told apart, so the window of a chunk (drop the rows the
// stream changed) cannot apply, nor can a copy resume after some rows:
// every row goes out at one position, from one snapshot of the table
// taken while no change to it could commit. A SHARE lock, held only for
// a moment, holds off its writers while the snapshot is taken (exported,
// and used by the cursor's connection) and until the high watermark
// commits with the lock's transaction; the cursor then reads that
// snapshot at leisure while writers go on.
type keylessCopy struct {
	conn     *pgx.Conn // the cursor's, in a REPEATABLE READ transaction
	tx       pgx.Tx
	def      *source.TableDef
	at       source.Event // the high watermark: where the rows go out
	emitting bool         // rows after the first chunk are still to go
}

// close ends the snapshot. Closing twice is harmless.
func (lc *keylessCopy) close() {
	ctx := context.Background()
	if lc.tx != nil {
		_ = lc.tx.Rollback(ctx)
		lc.tx = nil
	}
	if lc.conn != nil {
		_ = lc.conn.Close(ctx)
	}
}

// fetch reads the cursor's next rows into c.
func (lc *keylessCopy) fetch(ctx context.Context, c *chunk) error {
	rows, err := lc.tx.Query(ctx, fmt.Sprintf("FETCH %d FROM cdcctl_snapshot", c.limit))
	if err != nil {
		return fmt.Errorf("snapshot of %s: fetch: %w", c.table, err)
	}
	return c.load(rows, nil)
}

// wholeTable takes the snapshot of a table without a key between its
// watermarks and reads its first chunk; the copy goes on from it.
func wholeTable(ctx context.Context, cfg Config, table string, limit int) (*chunk, *keylessCopy, error) {
	fail := func(what string, err error) error {
		return fmt.Errorf("snapshot of %s (no primary key: read from one snapshot taken under a SHARE lock): %s: %w", table, what, explain(cfg, err))
	}
	lock, err := snapshotConn(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer lock.Close(context.Background())
	lc := &keylessCopy{}
	if lc.conn, err = snapshotConn(ctx, cfg); err != nil {
		return nil, nil, err
	}
	ltx, err := lock.Begin(ctx)
	if err != nil {
		lc.close()
		return nil, nil, fail("begin", err)
	}
	defer ltx.Rollback(context.Background())
	for _, stmt := range []string{
		// A writer holding the table for long makes the lock wait; the
		// chunk then fails with this reason and is tried again.
		`SET LOCAL lock_timeout = '30s'`,
		"LOCK TABLE " + quoteQualified(table) + " IN SHARE MODE",
	} {
		if _, err := ltx.Exec(ctx, stmt); err != nil {
			lc.close()
			return nil, nil, fail(stmt, err)
		}
	}
	var snapshot string
	if err := ltx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil || strings.ContainsAny(snapshot, `'\`) {
		lc.close()
		return nil, nil, fail("export the snapshot", fmt.Errorf("%q: %v", snapshot, err))
	}
	// The definition under the lock: no schema change can commit now.
	cat := &catalog{conn: lock, types: map[uint32]string{}}
	if lc.def, err = cat.tableDef(ctx, table); err != nil {
		lc.close()
		return nil, nil, fail("read its definition", err)
	}
	c := newChunk(table, lc.def, limit)
	if err := writeMark(ctx, lc.conn, c, "low"); err != nil {
		lc.close()
		return nil, nil, fail("write the low watermark", err)
	}
	if lc.tx, err = lc.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); err != nil {
		lc.close()
		return nil, nil, fail("begin the snapshot's transaction", err)
	}
	for _, stmt := range []string{
		"SET TRANSACTION SNAPSHOT '" + snapshot + "'",
		fmt.Sprintf("DECLARE cdcctl_snapshot NO SCROLL CURSOR FOR SELECT %s FROM %s", columnList(lc.def), quoteQualified(table)),
	} {
		if _, err := lc.tx.Exec(ctx, stmt); err != nil {
			lc.close()
			return nil, nil, fail(stmt, err)
		}
	}
	if err := lc.fetch(ctx, c); err != nil {
		lc.close()
		return nil, nil, err
	}
	// The high watermark commits with the lock's transaction: writers
	// waiting for the lock commit after it.
	if err := writeMark(ctx, ltx, c, "high"); err != nil {
		lc.close()
		return nil, nil, fail("write the high watermark", err)
	}
	if err := ltx.Commit(ctx); err != nil {
		lc.close()
		return nil, nil, fail("commit the lock's transaction", err)
	}
	return c, lc, nil
}
