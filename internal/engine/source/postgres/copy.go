package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// copyReader is a partition's reader while its share of the initial
// snapshot is not copied: it reads the span's changes from the event log
// and, between them, copies the span's rows chunk by chunk (snapshot.go).
// The next chunk is read in the background while the one before waits for
// its high watermark and goes out (at most chunksInFlight in flight), so
// PostgreSQL reads while the rows before are written. It is used by one
// dispatcher goroutine; the lock guards what the fetcher and others share.
type copyReader struct {
	s       *Source
	inner   *source.LogSpanReader
	span    model.Span
	keyless bool

	mu     sync.Mutex
	copied model.CopyProgress // as of Position()
	// chunks are in flight, oldest first: their watermarks written (or
	// being written), the high one not met yet.
	chunks   []*chunk
	fetching bool // a fetch runs
	limit    int  // rows the next chunk asks for
	ctx      context.Context
	cancel   context.CancelFunc
	fetches  sync.WaitGroup
	// out are a chunk's rows at its high watermark (outAt) still to
	// return; copied becomes next once they are.
	out   []source.Event
	outAt model.Ts
	next  model.CopyProgress
	// whole is the copy of a table without a key: one snapshot, all of
	// its rows at one position, fetched chunk by chunk as they go out.
	whole *keylessCopy

	fails    int
	retryAt  time.Time // no chunk before (after a failure)
	lastWarn time.Time

	// seen are the span's rows read while chunks are in flight: every
	// one after seenFrom, with its position, for the keys of
	// transactions a chunk's read did not see though they came before
	// its low watermark (visible.go).
	seen     []seenRow
	seenFrom model.Ts
}

// seenRow is a row's key and position.
type seenRow struct {
	ts  model.Ts
	key string
}

// chunkTimeout bounds one chunk's watermarks and read; markWait, how
// long its reader waits for the watermarks to come through the stream
// before it reads the chunk again. chunksInFlight chunks of a partition
// are read ahead of their high watermarks.
const (
	chunkTimeout   = 2 * time.Minute
	markWait       = 10 * time.Minute
	chunksInFlight = 2
)

// OpenCopying implements source.Copier: a partition whose share of the
// initial snapshot is not done copies it as it reads; any other reads the
// log.
func (s *Source) OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (source.Reader, error) {
	if s.cfg.Snapshot == "never" || copied.Done {
		return s.LogSource.Open(span, from)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &copyReader{s: s, inner: s.LogSource.OpenMarked(span, from), span: span, keyless: span.Key == model.NoKey,
		copied: copied, limit: firstChunkLimit(chunkRowsOf(s.cfg)), ctx: ctx, cancel: cancel, seenFrom: from}, nil
}

// Position implements source.Reader: inside a chunk's rows, just before
// their position.
func (r *copyReader) Position() model.Ts {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.emitting() {
		return r.outAt - 1
	}
	return r.inner.Position()
}

// emitting says rows at outAt are still to be returned.
func (r *copyReader) emitting() bool {
	return len(r.out) > 0 || r.whole != nil && r.whole.emitting
}

// Copied implements source.Copying.
func (r *copyReader) Copied() model.CopyProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copied
}

// Inside implements source.Parted: a chunk's rows are one position (all
// of a table without a key are).
func (r *copyReader) Inside() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emitting() || r.inner.Inside()
}

// StepOver implements source.DDLStepper. A schema change (or TRUNCATE)
// inside a chunk's window voids the chunk: it is read again.
func (r *copyReader) StepOver(ddl model.Ts) {
	r.inner.StepOver(ddl)
	r.mu.Lock()
	for _, c := range r.chunks {
		if c.open {
			c.stale = true
		}
	}
	r.mu.Unlock()
}

// Close implements source.Closer: the copy of a table without a key
// ends its snapshot.
func (r *copyReader) Close() error {
	r.cancel()
	r.fetches.Wait()
	r.mu.Lock()
	for _, c := range r.chunks {
		r.release(c)
	}
	r.chunks = nil
	lc := r.whole
	r.whole = nil
	r.mu.Unlock()
	if lc != nil {
		lc.close()
	}
	return nil
}

// Read implements source.Reader.
func (r *copyReader) Read(ctx context.Context, upTo model.Ts, max int) ([]source.Event, error) {
	r.mu.Lock()
	if len(r.out) == 0 && r.whole != nil && r.whole.emitting {
		r.mu.Unlock()
		r.fetchWhole()
		r.mu.Lock()
	}
	if r.emitting() {
		defer r.mu.Unlock()
		return r.take(max), nil
	}
	if len(r.chunks) > 0 && time.Since(r.chunks[0].began) > markWait {
		// Its watermarks should have come long ago (the changefeed's
		// reader was down that long?): read it again.
		r.failed(fmt.Errorf("the watermarks of a chunk of %s did not arrive within %s", r.span.Table, markWait))
	}
	if r.keyless {
		start := len(r.chunks) == 0 && !r.copied.Done && time.Now().After(r.retryAt)
		r.mu.Unlock()
		if start {
			r.startWhole()
		}
	} else {
		r.maybeFetch()
		r.mu.Unlock()
	}
	evs, err := r.inner.Read(ctx, upTo, max)
	for try := 0; err == nil && len(evs) == 0 && try < markPolls && r.awaitingMarks(); try++ {
		// A chunk's watermarks are on their way through the stream: wait
		// for them here, briefly, rather than let the dispatcher back off
		// (up to 160 ms) once per chunk.
		time.Sleep(2 * time.Millisecond)
		evs, err = r.inner.Read(ctx, upTo, max)
	}
	if err != nil {
		return nil, err
	}
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
			// Copied whole from one snapshot: every change before it is
			// in it.
			continue
		}
		for _, c := range r.chunks {
			c.observe(e)
		}
		if len(r.chunks) > 0 && e.Kind == source.KindDML && !r.keyless {
			r.seen = append(r.seen, seenRow{ts: e.CommitTs, key: e.Key})
		}
		kept = append(kept, *e)
	}
	if len(r.chunks) == 0 {
		r.seen, r.seenFrom = r.seen[:0], r.inner.Position()
	}
	if len(r.out) > 0 && len(kept) < max {
		kept = append(kept, r.take(max-len(kept))...)
	}
	return kept, nil
}

// markPolls bounds the short waits of one read for a chunk's watermarks.
const markPolls = 10

// awaitingMarks says a chunk has been read and its watermarks written,
// so they will come through the stream.
func (r *copyReader) awaitingMarks() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chunks) > 0 && r.chunks[0].loaded
}

// take returns up to n of a chunk's rows; after the last, the copy's
// progress includes the chunk.
func (r *copyReader) take(n int) []source.Event {
	n = min(max(n, 1), len(r.out))
	out := r.out[:n:n]
	r.out = r.out[n:]
	if len(r.out) == 0 {
		r.out = nil
		if !r.emitting() {
			r.copied = r.next
		}
	}
	return out
}

// onMark handles a watermark; only this reader's chunks' count.
func (r *copyReader) onMark(e *source.Event) {
	var mk mark
	if json.Unmarshal([]byte(e.Statement), &mk) != nil {
		return
	}
	i := 0
	for i < len(r.chunks) && r.chunks[i].id != mk.ID {
		i++
	}
	if i == len(r.chunks) {
		return // another partition's chunk, or an earlier run's
	}
	c := r.chunks[i]
	if mk.Kind == "low" {
		c.open = true
		return
	}
	if i != 0 {
		// Watermarks come in the order they were written, one chunk after
		// the other: an older chunk's high watermark went missing.
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before an older chunk's", c.table))
		return
	}
	r.chunks = r.chunks[1:]
	r.release(c)
	if !c.loaded {
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before its rows were read", c.table))
		return
	}
	if mk.Unsure || !r.dropUnseen(c, mk.Racy) {
		r.failed(fmt.Errorf("a chunk of %s cannot tell which changes before its low watermark its read saw; reading it again", c.table))
		return
	}
	if c.stale {
		// The table's schema changed between the read and the high
		// watermark: the rows' columns are not the stream's there. The
		// chunks after it were read after its rows: read them again too.
		r.failed(fmt.Errorf("the schema of %s changed while a chunk was read; reading it again", c.table))
		return
	}
	if !sameColumns(c.def, e.Def) && !c.projectOnto(e.Def) {
		// The catalog is ahead of the stream: pgoutput describes a
		// table's new columns only with its next row. Added columns are
		// left out (the stream's schema change, when it comes, gives
		// them to the rows before it); any other change waits for that
		// row.
		r.failed(fmt.Errorf("the columns of %s in the catalog (%s) are not those of the stream (%s) yet; reading the chunk again", c.table, columnNames(c.def), columnNames(e.Def)))
		return
	}
	rows := c.emit(e)
	next := r.copied
	next.Rows += int64(len(rows))
	if c.full {
		next = next.CopiedThrough(c.last)
	} else {
		next.Done, next.To = true, ""
	}
	if r.keyless {
		// One snapshot: the rest of the table goes out at this position
		// too, fetched as the rows before it have gone.
		next.To = ""
		if c.full && r.whole != nil {
			r.whole.emitting, r.whole.at = true, *e
		} else if r.whole != nil {
			r.whole.close()
			r.whole = nil
		}
	}
	r.fails, r.limit = 0, nextChunkRows(c, chunkRowsOf(r.s.cfg))
	r.out, r.outAt, r.next = rows, e.CommitTs, next
	if len(rows) == 0 && !r.emitting() {
		r.out, r.copied = nil, next
	}
}

// dropUnseen drops from the chunk the keys of rows at the positions
// given (transactions before its low watermark its read did not see)
// and forgets the rows no chunk in flight needs; false when a position
// is before what the reader remembers. r.mu is held; c is out of
// r.chunks.
func (r *copyReader) dropUnseen(c *chunk, racy []model.Ts) bool {
	ok := true
	for _, ts := range racy {
		if ts <= r.seenFrom {
			ok = false
			continue
		}
		for _, s := range r.seen {
			if s.ts == ts {
				c.dropped[s.key] = true
			}
		}
	}
	if len(r.chunks) > 0 {
		from := r.chunks[0].regAt
		for _, o := range r.chunks[1:] {
			from = min(from, o.regAt)
		}
		if from > r.seenFrom {
			i := 0
			for i < len(r.seen) && r.seen[i].ts <= from {
				i++
			}
			r.seen, r.seenFrom = append(r.seen[:0], r.seen[i:]...), from
		}
	}
	return ok
}

// failed gives up the chunk in flight and waits a while before the next
// (growing with failures in a row); a table without a key starts its copy
// over. It warns at most every half minute.
func (r *copyReader) failed(err error) {
	r.fails++
	r.retryAt = time.Now().Add(min(time.Duration(1<<min(r.fails-1, 5))*time.Second, 30*time.Second))
	// The chunks in flight go on from one another: all are read again.
	// A fetch still running drops its chunk when it ends.
	for _, c := range r.chunks {
		r.release(c)
	}
	r.chunks = nil
	if r.whole != nil {
		// Closed beside the reader (it rolls back and disconnects, which
		// may wait on the network), but owned by it: Close waits.
		whole := r.whole
		r.fetches.Add(1)
		go func() {
			defer r.fetches.Done()
			whole.close()
		}()
		r.whole = nil
		r.limit = firstChunkLimit(chunkRowsOf(r.s.cfg))
	}
	if time.Since(r.lastWarn) >= 30*time.Second {
		r.lastWarn = time.Now()
		r.s.log.Warn("initial snapshot: a chunk failed; trying again", "span", r.span.String(), "failures", r.fails, "err", err)
	}
}

// maybeFetch starts reading the next chunk in the background when fewer
// than chunksInFlight are in flight and the range may hold more: the
// rows after the last chunk in flight, or after what is copied. r.mu is
// held.
func (r *copyReader) maybeFetch() {
	if r.fetching || r.copied.Done || len(r.chunks) >= chunksInFlight || len(r.out) > 0 || time.Now().Before(r.retryAt) {
		return
	}
	from, ok := r.nextFrom()
	if !ok || !r.s.slots.take() {
		return // the range ends with the last chunk; or this node holds enough chunks
	}
	r.fetching = true
	r.fetches.Add(1)
	go r.fetch(from, r.limit)
}

// nextFrom is where the next chunk starts: after the last chunk in
// flight, or after what is copied; false when the last chunk ends the
// range. r.mu is held.
func (r *copyReader) nextFrom() (model.CopyProgress, bool) {
	from := r.copied
	if n := len(r.chunks); n > 0 {
		last := r.chunks[n-1]
		if !last.full {
			return from, false
		}
		from = from.CopiedThrough(last.last)
	}
	return from, true
}

// fetch reads a chunk of the span after from between its watermarks; it
// joins the chunks in flight before its low watermark is written, so the
// reader knows it when the watermark comes.
func (r *copyReader) fetch(from model.CopyProgress, limit int) {
	defer r.fetches.Done()
	ctx, cancel := context.WithTimeout(r.ctx, chunkTimeout)
	defer cancel()
	var c, registered *chunk
	conn, ok, err := r.s.pool.tryGet(ctx)
	if ok {
		c, err = readRange(ctx, conn, r.s.cfg, r.span, from, limit, func(c *chunk) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if want, ok := r.nextFrom(); !ok || want.To != from.To || want.Done {
				return false // the chunks before were given up meanwhile
			}
			c.slot, registered, c.regAt = true, c, r.inner.Position()
			r.chunks = append(r.chunks, c)
			return true
		}, func(c *chunk) {
			// Before the high watermark is written: the reader meets it
			// only after this.
			r.mu.Lock()
			c.loaded = true
			r.mu.Unlock()
		})
		if err != nil {
			_ = conn.Close(context.Background())
			conn = nil
		}
		r.s.pool.put(conn)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetching = false
	if registered == nil {
		r.s.slots.give() // nothing went in flight
	}
	if err != nil && r.ctx.Err() == nil {
		r.failed(err)
	}
	if c != nil && c.limit > 0 {
		r.limit = nextChunkRows(c, chunkRowsOf(r.s.cfg))
	}
}

// release gives back the slot a chunk in flight held on this node.
func (r *copyReader) release(c *chunk) {
	if c.slot {
		c.slot = false
		r.s.slots.give()
	}
}

// readRange reads a chunk of a span, the next rows after what is copied,
// between its watermarks, under the table's definition in the catalog now
// (checked against the stream's at the high watermark).
func readRange(ctx context.Context, conn *pgx.Conn, cfg Config, span model.Span, copied model.CopyProgress, limit int, register func(*chunk) bool, loaded func(*chunk)) (*chunk, error) {
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
	if !register(c) {
		return nil, nil
	}
	err = withWatermarks(ctx, conn, cfg, c, func() error {
		// One snapshot for the rows and for what it saw (visible.go).
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit, a no-op
		if err := tx.QueryRow(ctx, `SELECT txid_current_snapshot()::text`).Scan(&c.snap); err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		if err := c.load(rows, keyIdx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("snapshot of %s: %w", span.Table, explain(cfg, err))
		}
		// The query reads the span only; routing decides, to be sure.
		kept := c.rows[:0]
		for _, e := range c.rows {
			if span.Contains(e.Key) {
				kept = append(kept, e)
			}
		}
		c.rows = kept
		loaded(c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}
