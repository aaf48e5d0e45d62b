package source

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ChunkReader is what a database gives the initial snapshot (chunk.go):
// the read of a chunk between its watermarks.
type ChunkReader interface {
	// ReadChunk reads the rows of span after what is copied (at most
	// limit, in key order) between a low and a high watermark of a new
	// chunk, under the table's definition in the catalog now (checked
	// against the stream's at the high watermark). It calls register
	// with the chunk before its low watermark is written (false: give up,
	// return nil) and loaded once its rows are read, before the high
	// watermark is written.
	ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, limit int, register func(*Chunk) bool, loaded func(*Chunk)) (*Chunk, error)
}

// CopyOptions are a database source's for its copy readers.
type CopyOptions struct {
	Chunks    ChunkReader
	ChunkRows int         // the most rows a chunk reads (0: DefaultChunkRows)
	Slots     *ChunkSlots // the node's, shared by the source's readers
	// Whole starts the copy of a table without a key: its snapshot and
	// first chunk, between watermarks. Nil where the source has no such
	// tables.
	Whole func(ctx context.Context, table string, limit int) (*Chunk, WholeCopy, error)
	Log   *slog.Logger
}

// CopyReader is a partition's reader while its share of the initial
// snapshot is not copied: it reads the span's changes from the event log
// and, between them, copies the span's rows chunk by chunk. The next
// chunk is read in the background while the one before waits for its
// high watermark and goes out (at most chunksInFlight in flight), so the
// database reads while the rows before are written. It is used by one
// dispatcher goroutine; the lock guards what the fetcher and others
// share.
type CopyReader struct {
	o       CopyOptions
	inner   *LogSpanReader
	span    model.Span
	keyless bool

	mu     sync.Mutex
	copied model.CopyProgress // as of Position()
	// chunks are in flight, oldest first: their watermarks written (or
	// being written), the high one not met yet.
	chunks   []*Chunk
	fetching bool // a fetch runs
	limit    int  // rows the next chunk asks for
	ctx      context.Context
	cancel   context.CancelFunc
	fetches  sync.WaitGroup
	// out are a chunk's rows at its high watermark (outAt) still to
	// return; copied becomes next once they are.
	out   []Event
	outAt model.Ts
	next  model.CopyProgress
	// whole is the copy of a table without a key, emitting while its
	// rows after the first chunk are still to go out at wholeAt.
	whole    WholeCopy
	wholeAt  Event
	emitting bool

	fails    int
	retryAt  time.Time // no chunk before (after a failure)
	lastWarn time.Time

	// seen are the span's rows read while chunks are in flight: every
	// one after seenFrom, with its position, for the keys of
	// transactions a chunk's read did not see though they came before
	// its low watermark (Mark.Racy), and for the columns a change left
	// out (leftout.go).
	seen     []seenRow
	seenFrom model.Ts
}

// seenRow is a row's key and position, and the columns its change left
// out (nil: it gave them all).
type seenRow struct {
	ts   model.Ts
	key  string
	left []string
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

// NewCopyReader opens the copy of a span, from what is copied, reading
// the span's changes from the event log after from.
func (s *LogSource) NewCopyReader(span model.Span, from model.Ts, copied model.CopyProgress, o CopyOptions) *CopyReader {
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.Log == nil {
		o.Log = s.log
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &CopyReader{o: o, inner: s.OpenMarked(span, from), span: span, keyless: span.Key == model.NoKey,
		copied: copied, limit: firstChunkLimit(o.ChunkRows), ctx: ctx, cancel: cancel, seenFrom: from}
}

// Position implements Reader: inside a chunk's rows, just before their
// position.
func (r *CopyReader) Position() model.Ts {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isEmitting() {
		return r.outAt - 1
	}
	return r.inner.Position()
}

// isEmitting says rows at outAt are still to be returned.
func (r *CopyReader) isEmitting() bool {
	return len(r.out) > 0 || r.whole != nil && r.emitting
}

// Copied implements Copying.
func (r *CopyReader) Copied() model.CopyProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copied
}

// Inside implements Parted: a chunk's rows are one position (all of a
// table without a key are).
func (r *CopyReader) Inside() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isEmitting() || r.inner.Inside()
}

// StepOver implements DDLStepper. A schema change (or TRUNCATE) inside
// a chunk's window voids the chunk: it is read again.
func (r *CopyReader) StepOver(ddl model.Ts) {
	r.inner.StepOver(ddl)
	r.mu.Lock()
	for _, c := range r.chunks {
		if c.open {
			c.stale = true
		}
	}
	r.mu.Unlock()
}

// Close implements Closer: the copy of a table without a key ends its
// snapshot.
func (r *CopyReader) Close() error {
	r.cancel()
	r.fetches.Wait()
	r.mu.Lock()
	for _, c := range r.chunks {
		r.release(c)
	}
	r.chunks = nil
	whole := r.whole
	r.whole = nil
	r.mu.Unlock()
	if whole != nil {
		whole.Close()
	}
	return nil
}

// Read implements Reader.
func (r *CopyReader) Read(ctx context.Context, upTo model.Ts, max int) ([]Event, error) {
	r.mu.Lock()
	if len(r.out) == 0 && r.whole != nil && r.emitting {
		r.mu.Unlock()
		r.fetchWhole()
		r.mu.Lock()
	}
	if r.isEmitting() {
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
	return readOnPastMarks(ctx, func() ([]Event, int, error) { return r.readInner(ctx, upTo, max) }, r.emittingNow)
}

// emittingNow is isEmitting, taking the lock.
func (r *CopyReader) emittingNow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isEmitting()
}

// maxMarkPasses bounds the reads one Read makes past watermarks.
const maxMarkPasses = 64

// readOnPastMarks reads again while a read met only watermarks it does
// not pass on (most are other partitions' chunks': a read of the log ends
// at each watermark of the table), until one returns events, meets none,
// fails, or stop says the reader has rows of its own to give. Returned
// empty, each such read made the dispatcher back off (up to 160 ms): with
// four partitions copying one table, a chunk's own high watermark waited
// behind six others, 0.6 s a chunk.
func readOnPastMarks(ctx context.Context, read func() ([]Event, int, error), stop func() bool) ([]Event, error) {
	for pass := 0; ; pass++ {
		evs, marks, err := read()
		if err != nil || len(evs) > 0 || marks == 0 || pass >= maxMarkPasses || ctx.Err() != nil || stop != nil && stop() {
			return evs, err
		}
	}
}

// readInner reads the span's events from the log and handles the
// watermarks among them; it returns the events to pass on and how many
// watermarks it met.
func (r *CopyReader) readInner(ctx context.Context, upTo model.Ts, max int) ([]Event, int, error) {
	evs, err := r.inner.Read(ctx, upTo, max)
	for try := 0; err == nil && len(evs) == 0 && try < markPolls && r.awaitingMarks(); try++ {
		// A chunk's watermarks are on their way through the stream: wait
		// for them here, briefly, rather than let the dispatcher back off
		// (up to 160 ms) once per chunk.
		time.Sleep(2 * time.Millisecond)
		evs, err = r.inner.Read(ctx, upTo, max)
	}
	if err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept, marks := evs[:0], 0
	for i := range evs {
		e := &evs[i]
		if e.Kind == KindMark {
			r.onMark(e) // the read's last event
			marks++
			continue
		}
		if r.keyless && !r.copied.Done && e.Kind != KindTxn {
			// Copied whole from one snapshot: every change before it is
			// in it.
			continue
		}
		for _, c := range r.chunks {
			c.observe(e)
		}
		if len(r.chunks) > 0 && e.Kind == KindDML && !r.keyless {
			r.seen = append(r.seen, seenRow{ts: e.CommitTs, key: e.Key, left: leftOut(e)})
		}
		kept = append(kept, *e)
	}
	if len(r.chunks) == 0 {
		r.seen, r.seenFrom = r.seen[:0], r.inner.Position()
	}
	if len(r.out) > 0 && len(kept) < max {
		kept = append(kept, r.take(max-len(kept))...)
	}
	return kept, marks, nil
}

// markPolls bounds the short waits of one read for a chunk's watermarks.
const markPolls = 10

// awaitingMarks says a chunk has been read and its watermarks written,
// so they will come through the stream.
func (r *CopyReader) awaitingMarks() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chunks) > 0 && r.chunks[0].loaded
}

// take returns up to n of a chunk's rows; after the last, the copy's
// progress includes the chunk.
func (r *CopyReader) take(n int) []Event {
	n = min(max(n, 1), len(r.out))
	out := r.out[:n:n]
	r.out = r.out[n:]
	if len(r.out) == 0 {
		r.out = nil
		if !r.isEmitting() {
			r.copied = r.next
		}
	}
	return out
}

// onMark handles a watermark; only this reader's chunks' count.
func (r *CopyReader) onMark(e *Event) {
	var mk Mark
	if json.Unmarshal([]byte(e.Statement), &mk) != nil {
		return
	}
	i := 0
	for i < len(r.chunks) && r.chunks[i].ID != mk.ID {
		i++
	}
	if i == len(r.chunks) {
		return // another partition's chunk, or an earlier run's
	}
	c := r.chunks[i]
	if mk.Kind == "low" {
		c.open, c.lowAt = true, e.CommitTs
		return
	}
	if i != 0 {
		// Watermarks come in the order they were written, one chunk after
		// the other: an older chunk's high watermark went missing.
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before an older chunk's", c.Table))
		return
	}
	r.chunks = r.chunks[1:]
	r.release(c)
	want := r.unsent(c, mk.Racy) // before dropUnseen forgets rows
	if !c.loaded {
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before its rows were read", c.Table))
		return
	}
	if mk.Unsure || !r.dropUnseen(c, mk.Racy) {
		r.failed(fmt.Errorf("a chunk of %s cannot tell which changes before its low watermark its read saw; reading it again", c.Table))
		return
	}
	if c.stale {
		// The table's schema changed between the read and the high
		// watermark: the rows' columns are not the stream's there. The
		// chunks after it were read after its rows: read them again too.
		r.failed(fmt.Errorf("the schema of %s changed while a chunk was read; reading it again", c.Table))
		return
	}
	if !SameColumns(c.Def, e.Def) && !c.projectOnto(e.Def) {
		// The catalog is ahead of the stream (PostgreSQL describes a
		// table's new columns only with its next row). Added columns are
		// left out (the stream's schema change, when it comes, gives
		// them to the rows before it); any other change waits for that
		// row.
		r.failed(fmt.Errorf("the columns of %s in the catalog (%s) are not those of the stream (%s) yet; reading the chunk again", c.Table, ColumnNames(c.Def), ColumnNames(e.Def)))
		return
	}
	fills := c.fills(e, want)
	rows := c.emit(e)
	next := r.copied
	next.Rows += int64(len(rows))
	rows = append(rows, fills...)
	if c.Full {
		next = next.CopiedThrough(c.Last)
	} else {
		next.Done, next.To = true, ""
	}
	if r.keyless {
		// One snapshot: the rest of the table goes out at this position
		// too, fetched as the rows before it have gone.
		next.To = ""
		if c.Full && r.whole != nil {
			r.emitting, r.wholeAt = true, *e
		} else if r.whole != nil {
			r.whole.Close()
			r.whole = nil
		}
	}
	r.fails, r.limit = 0, nextChunkRows(c, r.o.ChunkRows)
	r.out, r.outAt, r.next = rows, e.CommitTs, next
	if len(rows) == 0 && !r.isEmitting() {
		r.out, r.copied = nil, next
	}
}

// dropUnseen drops from the chunk the keys of rows at the positions
// given (transactions before its low watermark its read did not see)
// and forgets the rows no chunk in flight needs; false when a position
// is before what the reader remembers. r.mu is held; c is out of
// r.chunks.
func (r *CopyReader) dropUnseen(c *Chunk, racy []model.Ts) bool {
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
func (r *CopyReader) failed(err error) {
	r.fails++
	r.retryAt = time.Now().Add(min(time.Duration(1<<min(r.fails-1, 5))*time.Second, 30*time.Second))
	// The chunks in flight go on from one another: all are read again.
	// A fetch still running drops its chunk when it ends.
	for _, c := range r.chunks {
		r.release(c)
	}
	r.chunks = nil
	if r.whole != nil {
		// Closed beside the reader (it may wait on the network), but
		// owned by it: Close waits.
		whole := r.whole
		r.fetches.Add(1)
		go func() {
			defer r.fetches.Done()
			whole.Close()
		}()
		r.whole, r.emitting = nil, false
		r.limit = firstChunkLimit(r.o.ChunkRows)
	}
	if time.Since(r.lastWarn) >= 30*time.Second {
		r.lastWarn = time.Now()
		r.o.Log.Warn("initial snapshot: a chunk failed; trying again", "span", r.span.String(), "failures", r.fails, "err", err)
	}
}

// maybeFetch starts reading the next chunk in the background when fewer
// than chunksInFlight are in flight and the range may hold more: the
// rows after the last chunk in flight, or after what is copied. r.mu is
// held.
func (r *CopyReader) maybeFetch() {
	if r.fetching || r.copied.Done || len(r.chunks) >= chunksInFlight || len(r.out) > 0 || time.Now().Before(r.retryAt) {
		return
	}
	from, ok := r.nextFrom()
	if !ok || !r.o.Slots.take() {
		return // the range ends with the last chunk; or this node holds enough chunks
	}
	r.fetching = true
	r.fetches.Add(1)
	go r.fetch(from, r.limit)
}

// nextFrom is where the next chunk starts: after the last chunk in
// flight, or after what is copied; false when the last chunk ends the
// range. r.mu is held.
func (r *CopyReader) nextFrom() (model.CopyProgress, bool) {
	from := r.copied
	if len(r.out) > 0 {
		// A chunk's rows are going out: what is copied is through it once
		// they have. A fetch begun while it was in flight starts there.
		if from = r.next; from.Done {
			return from, false
		}
	}
	if n := len(r.chunks); n > 0 {
		last := r.chunks[n-1]
		if !last.Full {
			return from, false
		}
		from = from.CopiedThrough(last.Last)
	}
	return from, true
}

// fetch reads a chunk of the span after from between its watermarks; it
// joins the chunks in flight before its low watermark is written, so the
// reader knows it when the watermark comes.
func (r *CopyReader) fetch(from model.CopyProgress, limit int) {
	defer r.fetches.Done()
	ctx, cancel := context.WithTimeout(r.ctx, chunkTimeout)
	defer cancel()
	var registered *Chunk
	c, err := r.o.Chunks.ReadChunk(ctx, r.span, from, limit, func(c *Chunk) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if want, ok := r.nextFrom(); !ok || want.To != from.To || want.Done {
			return false // the chunks before were given up meanwhile
		}
		c.slot, registered, c.regAt = true, c, r.inner.Position()
		r.chunks = append(r.chunks, c)
		return true
	}, func(c *Chunk) {
		// Before the high watermark is written: the reader meets it
		// only after this.
		r.mu.Lock()
		c.loaded = true
		r.mu.Unlock()
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetching = false
	if registered == nil {
		r.o.Slots.give() // nothing went in flight
	}
	if err != nil && r.ctx.Err() == nil {
		r.failed(err)
	}
	if c != nil && c.Limit > 0 {
		r.limit = nextChunkRows(c, r.o.ChunkRows)
	}
	if err == nil && registered != nil && r.ctx.Err() == nil {
		// The next chunk is read while this one waits for its high
		// watermark, not when the dispatcher next calls (it may be
		// backing off).
		r.maybeFetch()
	}
}

// Changed implements Notifier: its rows and watermarks come through the
// log.
func (r *CopyReader) Changed() <-chan struct{} { return r.inner.Changed() }

// Awaiting implements source.Awaiting: a chunk is read and its high
// watermark on its way through the stream, or a fetch is under way.
func (r *CopyReader) Awaiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetching || len(r.chunks) > 0
}

// release gives back the slot a chunk in flight held on this node.
func (r *CopyReader) release(c *Chunk) {
	if c.slot {
		c.slot = false
		r.o.Slots.give()
	}
}
