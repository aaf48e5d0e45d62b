package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// copyReader is a partition's reader while its share of the initial
// snapshot is not copied: it reads the span's changes from the event log
// and, between them, copies the span's rows chunk by chunk (snapshot.go),
// one chunk in flight at a time. It is used by one dispatcher goroutine;
// the lock guards what others may ask (Position, Copied, Inside).
type copyReader struct {
	s       *Source
	inner   *eventlog.Reader
	span    model.Span
	keyless bool

	mu     sync.Mutex
	copied model.CopyProgress // as of Position()
	chunk  *chunk             // in flight: its high watermark not met yet
	limit  int                // rows the next chunk asks for
	// out are a chunk's rows at its high watermark (outAt) still to
	// return; copied becomes next once they are.
	out   []source.Event
	outAt model.Ts
	next  model.CopyProgress
	// locked is the copy of a table without a key, under its lock.
	locked *keylessCopy

	fails    int
	retryAt  time.Time // no chunk before (after a failure)
	lastWarn time.Time
}

// chunkTimeout bounds one chunk's watermarks and read.
const chunkTimeout = 2 * time.Minute

// OpenCopying implements source.Copier: a partition whose share of the
// initial snapshot is not done copies it as it reads; any other reads the
// log.
func (s *Source) OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (source.Reader, error) {
	if s.cfg.Snapshot == "never" || copied.Done {
		return s.Source.Open(span, from)
	}
	return &copyReader{s: s, inner: s.Source.OpenMarked(span, from), span: span, keyless: span.Key == model.NoKey,
		copied: copied, limit: firstChunkLimit()}, nil
}

// Position implements source.Reader: inside a chunk's rows, just before
// their position.
func (r *copyReader) Position() model.Ts {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.out) > 0 {
		return r.outAt - 1
	}
	return r.inner.Position()
}

// Copied implements source.Copying.
func (r *copyReader) Copied() model.CopyProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copied
}

// Inside implements source.Parted: a chunk's rows are one position, and
// a table without a key is copied whole once begun (its rows cannot say
// which were copied).
func (r *copyReader) Inside() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.out) > 0 || r.inner.Inside() || r.locked != nil && r.locked.emitted
}

// StepOver implements source.DDLStepper. A schema change (or TRUNCATE)
// inside a chunk's window voids the chunk: it is read again.
func (r *copyReader) StepOver(ddl model.Ts) {
	r.inner.StepOver(ddl)
	r.mu.Lock()
	if r.chunk != nil && r.chunk.open {
		r.chunk.stale = true
	}
	r.mu.Unlock()
}

// Close implements source.Closer: a table without a key being copied is
// unlocked.
func (r *copyReader) Close() error {
	r.mu.Lock()
	lc := r.locked
	r.locked = nil
	r.mu.Unlock()
	if lc != nil {
		lc.close()
	}
	return nil
}

// Read implements source.Reader.
func (r *copyReader) Read(upTo model.Ts, max int) []source.Event {
	r.mu.Lock()
	if len(r.out) > 0 {
		defer r.mu.Unlock()
		return r.take(max)
	}
	start := r.chunk == nil && !r.copied.Done && time.Now().After(r.retryAt)
	r.mu.Unlock()
	if start {
		r.startChunk()
	}
	evs := r.inner.Read(upTo, max)
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := evs[:0]
	for i := range evs {
		e := &evs[i]
		if e.Kind == source.KindMark {
			r.onMark(e) // the read's last event
			continue
		}
		if r.keyless && !r.copied.Done {
			// Copied whole under a lock: every change before the copy
			// is in it, none commits during it.
			continue
		}
		if r.chunk != nil {
			r.chunk.observe(e)
		}
		kept = append(kept, *e)
	}
	if len(r.out) > 0 && len(kept) < max {
		kept = append(kept, r.take(max-len(kept))...)
	}
	return kept
}

// take returns up to n of a chunk's rows; after the last, the copy's
// progress includes the chunk.
func (r *copyReader) take(n int) []source.Event {
	n = min(max(n, 1), len(r.out))
	out := r.out[:n:n]
	r.out = r.out[n:]
	if len(r.out) == 0 {
		r.out, r.copied = nil, r.next
	}
	return out
}

// onMark handles a watermark; only this reader's chunk's count.
func (r *copyReader) onMark(e *source.Event) {
	var mk mark
	if json.Unmarshal([]byte(e.Statement), &mk) != nil || r.chunk == nil || mk.ID != r.chunk.id {
		return // another partition's chunk, or an earlier run's
	}
	if mk.Kind == "low" {
		r.chunk.open = true
		return
	}
	c := r.chunk
	r.chunk = nil
	if c.stale || !sameColumns(c.def, e.Def) {
		// The table's schema changed between the read and the high
		// watermark (or pgoutput has not sent the new columns yet): the
		// rows' columns are not the stream's there. Read it again.
		r.failed(fmt.Errorf("the schema of %s changed while a chunk was read; reading it again", c.table))
		return
	}
	rows := c.emit(e)
	next := r.copied
	next.Rows += int64(len(rows))
	switch {
	case !c.full:
		next.Done, next.To = true, ""
	case !r.keyless:
		next = next.CopiedThrough(c.last)
	}
	if r.locked != nil && len(rows) > 0 {
		r.locked.emitted = true
	}
	if !c.full && r.keyless {
		r.locked = nil // unlocked when its last high watermark was written
	}
	r.fails, r.limit = 0, nextChunkRows(c)
	if len(rows) == 0 {
		r.copied = next
		return
	}
	r.out, r.outAt, r.next = rows, e.CommitTs, next
}

// failed gives up the chunk in flight and waits a while before the next
// (growing with failures in a row); a table without a key starts its copy
// over. It warns at most every half minute.
func (r *copyReader) failed(err error) {
	r.fails++
	r.retryAt = time.Now().Add(min(time.Duration(1<<min(r.fails-1, 5))*time.Second, 30*time.Second))
	if r.locked != nil {
		go r.locked.close()
		r.locked = nil
		r.limit = firstChunkLimit()
	}
	if time.Since(r.lastWarn) >= 30*time.Second {
		r.lastWarn = time.Now()
		r.s.log.Warn("initial snapshot: a chunk failed; trying again", "span", r.span.String(), "failures", r.fails, "err", err)
	}
}

// startChunk reads the next chunk of the span between its watermarks.
// With every copy connection of this node in use, it waits for a later
// read.
func (r *copyReader) startChunk() {
	ctx, cancel := context.WithTimeout(context.Background(), chunkTimeout)
	defer cancel()
	r.mu.Lock()
	limit, copied, locked := r.limit, r.copied, r.locked
	r.mu.Unlock()
	if r.keyless {
		c, lc, err := r.keylessChunk(ctx, locked, limit)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.chunk, r.locked = c, lc
		if err != nil {
			r.limit = firstChunkLimit()
			r.failed(err)
		}
		return
	}
	conn, ok, err := r.s.pool.tryGet(ctx)
	if !ok {
		if err != nil {
			r.mu.Lock()
			r.failed(err)
			r.mu.Unlock()
		}
		return
	}
	c, err := readRange(ctx, conn, r.s.cfg, r.span, copied, limit)
	if err != nil {
		_ = conn.Close(context.Background())
		conn = nil
	}
	r.s.pool.put(conn)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(err)
		return
	}
	r.chunk = c
}

// readRange reads a chunk of a span, the next rows after what is copied,
// between its watermarks, under the table's definition in the catalog now
// (checked against the stream's at the high watermark).
func readRange(ctx context.Context, conn *pgx.Conn, cfg Config, span model.Span, copied model.CopyProgress, limit int) (*chunk, error) {
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	def, err := cat.tableDef(ctx, span.Table)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
	}
	if len(def.KeyNames()) == 0 {
		return nil, fmt.Errorf("snapshot of %s: the table has no primary key now; its changefeed was created with one", span.Table)
	}
	q, args, keyIdx, err := rangeQuery(def, span, copied, limit)
	if err != nil {
		return nil, err
	}
	c := newChunk(span.Table, def, limit)
	err = withWatermarks(ctx, conn, cfg, c, func() error {
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		return c.load(rows, keyIdx)
	})
	if err != nil {
		return nil, err
	}
	// The query reads the span only; routing decides, to be sure.
	kept := c.rows[:0]
	for _, e := range c.rows {
		if span.Contains(e.Key) {
			kept = append(kept, e)
		}
	}
	c.rows = kept
	return c, nil
}

// keylessCopy is the copy of a table without a primary key. Its rows
// cannot be told apart, so the window of a chunk (drop the rows the stream
// changed) cannot apply: the table is read under a SHARE lock instead,
// which holds off its writers while it is read, so no change to it
// commits between any of its chunks' watermarks. The chunks come from one
// cursor in the locked transaction (tx); the watermarks go through marks,
// another connection, so they commit while the lock is held.
type keylessCopy struct {
	conn, marks *pgx.Conn
	tx          pgx.Tx
	declared    bool // the cursor
	emitted     bool // rows of it have been returned
}

// close ends the copy; the lock goes with its transaction. Closing twice
// is harmless.
func (lc *keylessCopy) close() {
	ctx := context.Background()
	if lc.tx != nil {
		_ = lc.tx.Rollback(ctx)
		lc.tx = nil
	}
	for _, c := range []*pgx.Conn{lc.conn, lc.marks} {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
}

// keylessChunk reads the next chunk of a table without a key, locking it
// first (lc nil); after the last chunk's high watermark the lock is
// released. It returns the copy with the chunk; on failure the copy is
// closed.
func (r *copyReader) keylessChunk(ctx context.Context, lc *keylessCopy, limit int) (*chunk, *keylessCopy, error) {
	cfg, table := r.s.cfg, r.span.Table
	fail := func(what string, err error) error {
		return fmt.Errorf("snapshot of %s (no primary key: read under a SHARE lock): %s: %w", table, what, explain(cfg, err))
	}
	if lc == nil {
		var err error
		lc = &keylessCopy{}
		if lc.conn, err = snapshotConn(ctx, cfg); err == nil {
			lc.marks, err = snapshotConn(ctx, cfg)
		}
		if err != nil {
			lc.close()
			return nil, nil, err
		}
		if lc.tx, err = lc.conn.Begin(ctx); err != nil {
			lc.close()
			return nil, nil, fail("begin", err)
		}
		for _, stmt := range []string{
			// A writer holding the table for long makes the lock wait; the
			// chunk then fails with this reason and is tried again. A
			// reader that dies holding the lock loses it with its session.
			`SET LOCAL lock_timeout = '30s'`,
			`SET LOCAL idle_in_transaction_session_timeout = '10min'`,
			"LOCK TABLE " + quoteQualified(table) + " IN SHARE MODE",
		} {
			if _, err := lc.tx.Exec(ctx, stmt); err != nil {
				lc.close()
				return nil, nil, fail(stmt, err)
			}
		}
	}
	// The definition under the lock: no schema change can commit now.
	cat := &catalog{conn: lc.marks, types: map[uint32]string{}}
	def, err := cat.tableDef(ctx, table)
	if err != nil {
		lc.close()
		return nil, nil, fail("read its definition", err)
	}
	if !lc.declared {
		stmt := fmt.Sprintf("DECLARE cdcctl_snapshot NO SCROLL CURSOR FOR SELECT %s FROM %s", columnList(def), quoteQualified(table))
		if _, err := lc.tx.Exec(ctx, stmt); err != nil {
			lc.close()
			return nil, nil, fail(stmt, err)
		}
		lc.declared = true
	}
	c := newChunk(table, def, limit)
	err = withWatermarks(ctx, lc.marks, cfg, c, func() error {
		rows, err := lc.tx.Query(ctx, fmt.Sprintf("FETCH %d FROM cdcctl_snapshot", c.limit))
		if err != nil {
			return fail("fetch", err)
		}
		return c.load(rows, nil)
	})
	if err == nil && !c.full {
		// The last chunk's high watermark is written: writers may go on,
		// their changes come after it.
		err = lc.tx.Commit(ctx)
		lc.tx = nil
		if err != nil {
			err = fail("commit", err)
		}
	}
	if err != nil {
		lc.close()
		return nil, nil, err
	}
	if !c.full {
		lc.close()
	}
	return c, lc, nil
}
