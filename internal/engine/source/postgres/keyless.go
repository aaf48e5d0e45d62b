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
	conn *pgx.Conn // the cursor's, in a REPEATABLE READ transaction
	tx   pgx.Tx
	def  *source.TableDef
}

// Def implements source.WholeCopy.
func (lc *keylessCopy) Def() *source.TableDef { return lc.def }

// Close implements source.WholeCopy.
func (lc *keylessCopy) Close() {
	ctx := context.Background()
	if lc.tx != nil {
		_ = lc.tx.Rollback(ctx)
		lc.tx = nil
	}
	if lc.conn != nil {
		_ = lc.conn.Close(ctx)
	}
}

// Fetch implements source.WholeCopy: the cursor's next rows.
func (lc *keylessCopy) Fetch(ctx context.Context, c *source.Chunk) error {
	rows, err := lc.tx.Query(ctx, fmt.Sprintf("FETCH %d FROM cdcctl_snapshot", c.Limit))
	if err != nil {
		return fmt.Errorf("snapshot of %s: fetch: %w", c.Table, err)
	}
	return load(c, rows, nil)
}

// wholeTable takes the snapshot of a table without a key between its
// watermarks and reads its first chunk; the copy goes on from it.
func (s *Source) wholeTable(ctx context.Context, table string, limit int) (*source.Chunk, source.WholeCopy, error) {
	cfg := s.cfg
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
		lc.Close()
		return nil, nil, fail("begin", err)
	}
	defer ltx.Rollback(context.Background())
	// The table's own rows (inherited.go): its inheritance children
	// neither read nor locked; a partitioned table's partitions both.
	from, err := fromTable(ctx, ltx, table)
	if err != nil {
		lc.Close()
		return nil, nil, fail("read its kind", err)
	}
	for _, stmt := range []string{
		// A writer holding the table for long makes the lock wait; the
		// chunk then fails with this reason and is tried again.
		`SET LOCAL lock_timeout = '30s'`,
		"LOCK TABLE " + from + " IN SHARE MODE",
	} {
		if _, err := ltx.Exec(ctx, stmt); err != nil {
			lc.Close()
			return nil, nil, fail(stmt, err)
		}
	}
	var snapshot string
	if err := ltx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil || strings.ContainsAny(snapshot, `'\`) {
		lc.Close()
		return nil, nil, fail("export the snapshot", fmt.Errorf("%q: %v", snapshot, err))
	}
	// The definition under the lock: no schema change can commit now.
	cat := &catalog{conn: lock, types: map[uint32]string{}}
	if lc.def, err = cat.tableDef(ctx, table); err != nil {
		lc.Close()
		return nil, nil, fail("read its definition", err)
	}
	c := source.NewChunk(table, lc.def, limit)
	if err := writeMark(ctx, lc.conn, c, "low"); err != nil {
		lc.Close()
		return nil, nil, fail("write the low watermark", err)
	}
	if lc.tx, err = lc.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); err != nil {
		lc.Close()
		return nil, nil, fail("begin the snapshot's transaction", err)
	}
	for _, stmt := range []string{
		"SET TRANSACTION SNAPSHOT '" + snapshot + "'",
		fmt.Sprintf("DECLARE cdcctl_snapshot NO SCROLL CURSOR FOR SELECT %s FROM %s", columnList(lc.def), from),
	} {
		if _, err := lc.tx.Exec(ctx, stmt); err != nil {
			lc.Close()
			return nil, nil, fail(stmt, err)
		}
	}
	if err := lc.Fetch(ctx, c); err != nil {
		lc.Close()
		return nil, nil, err
	}
	// The high watermark commits with the lock's transaction: writers
	// waiting for the lock commit after it.
	if err := writeMark(ctx, ltx, c, "high"); err != nil {
		lc.Close()
		return nil, nil, fail("write the high watermark", err)
	}
	if err := ltx.Commit(ctx); err != nil {
		lc.Close()
		return nil, nil, fail("commit the lock's transaction", err)
	}
	return c, lc, nil
}
