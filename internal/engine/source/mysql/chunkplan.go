package mysql

// How a chunk is read: by byte ranges of the key, or in its index's order
// (indexorder.go), and where the server filters the span by its first
// column's text, with a budget and the read without the filter to fall
// back on (firstbound.go, filterbudget.go).

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// chunkRead is how a chunk is read: its query, a grown chunk's query of
// its further rows (nil: it does not grow), and a full chunk's query of
// the copy's horizon in the same snapshot (nil: the copy has one).
type chunkRead struct {
	q       string
	ordered bool   // in the key's index order (indexorder.go)
	order   string // that order's name
	more    func(c *source.Chunk, n int) (string, error)
	horizon func() (string, error)
	// plain is the read without the server filtering the span by the
	// text of its key's first column (firstbound.go), where it does: the
	// queries of this one each have a budget, and past it the chunk is
	// read as plain reads it.
	plain *chunkRead
}

// planChunk is how the chunk of span after what is copied is read: in
// the key's index order, unless the copy began in byte ranges (progress
// saved before, or a key that was not).
func (s *Source) planChunk(ctx context.Context, conn *sql.Conn, def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (chunkRead, error) {
	var how chunkRead
	if !indexOrdered(def) || copied.To != "" {
		if copied.Cursor != "" {
			// A copy begun in the index's order, now in byte ranges (its
			// key changed): its horizon is in the other order.
			copied.Horizon = ""
		}
		var err error
		if how.q, err = rangeQuery(def, span, copied, limit); err != nil {
			return how, err
		}
		if rangeIndexed(def) {
			// Byte ranges that are ranges of the key's index (an integer
			// or a binary key): read on after the last row read, as the
			// next chunk would.
			how.more = func(c *source.Chunk, n int) (string, error) { return rangeQuery(def, span, c.Through(copied), n) }
		}
		if copied.Horizon == "" {
			how.horizon = func() (string, error) { return lastRowQuery(def, span, copied) }
		}
		return how, nil
	}
	colls, err := keyCollations(ctx, conn, span.Table)
	if err != nil {
		return how, fmt.Errorf("snapshot of %s: %w", span.Table, explain(s.cfg, err))
	}
	how.ordered, how.order = true, orderOf(def, colls)
	cursor, last := copied.Cursor, copied.Horizon
	if cursor != "" && copied.Order != how.order {
		// A key's collation changed while the table copied: the rows
		// behind the cursor are not those of the new order (the change
		// rewrote none of them in the log). Its range is read again from
		// its start: the rows copied before arrive twice.
		s.log.Warn("snapshot: the collation or the type of a key column changed while its table copied; the partition copies its range again from the start", "table", span.Table, "was", copied.Order, "now", how.order)
		cursor = ""
	}
	if cursor == "" {
		last = "" // a horizon in another order (or of byte ranges): read again
	}
	ordered := func(first bool) (chunkRead, error) {
		how := how
		var err error
		if how.q, err = boundedQuery(def, span, cursor, last, limit, "", colls, first); err != nil {
			return how, err
		}
		how.more = readOnBounded(def, span, last, colls, first)
		if last == "" {
			// The last row in the index's order of what the partition
			// reads: the whole index (it keeps its span's rows), a
			// BIGINT UNSIGNED key's ranges of values (unsigned.go), or
			// those between its first values (firstbound.go).
			how.horizon = func() (string, error) { return boundedQuery(def, span, "", "", 1, " DESC", colls, first) }
		}
		return how, nil
	}
	if !filteredFirst(def, span) {
		return ordered(true)
	}
	// The server filters the span's rows by their first column's text as
	// it walks the index: where they are few, a chunk walks far for them (the
	// whole table, for a partition with none left). Each statement has a
	// budget (filterBudget); past it, the chunk is read again without the
	// filter, as every chunk of the span for a while after
	// (sparseFor).
	plain, err := ordered(false)
	if err != nil || s.sparse(span) {
		return plain, err
	}
	if how, err = ordered(true); err != nil {
		return how, err
	}
	how.plain = &plain
	return how, nil
}

// readOn is the query of a grown chunk's further rows (n at most): the
// index's next range, on from the last row read, in the same snapshot.
// (Chunks of byte ranges read on only where the ranges are the index's,
// rangeIndexed: elsewhere each query sorts the rest of the range.)
func readOn(def *source.TableDef, span model.Span, horizon string, colls map[string]keyCollation) func(c *source.Chunk, n int) (string, error) {
	return readOnBounded(def, span, horizon, colls, true)
}

// readOnBounded is readOn, its span's first values bounded or not
// (boundedQuery).
func readOnBounded(def *source.TableDef, span model.Span, horizon string, colls map[string]keyCollation, first bool) func(c *source.Chunk, n int) (string, error) {
	return func(c *source.Chunk, n int) (string, error) {
		return boundedQuery(def, span, c.Last, horizon, n, "", colls, first)
	}
}
