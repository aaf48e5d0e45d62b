package source

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ChunkReader is what a database gives the initial snapshot (chunk.go):
// the read of a chunk between its watermarks.
type ChunkReader interface {
	// ReadChunk reads the rows of span after what is copied (as many as
	// ask says, in key order) between a low and a high watermark of a
	// new chunk, under the table's definition in the catalog now
	// (checked against the stream's at the high watermark). It calls
	// register with the chunk before its low watermark is written
	// (false: give up, return nil) and loaded once its rows are read,
	// before the high watermark is written.
	ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, ask ChunkAsk, register func(*Chunk) bool, loaded func(*Chunk)) (*Chunk, error)
}

// CopyOptions are a database source's for its copy readers.
type CopyOptions struct {
	Chunks    ChunkReader
	ChunkRows int         // the most rows a chunk reads (0: DefaultChunkRows)
	Slots     *ChunkSlots // the node's, shared by the source's readers
	Pace      *Pace       // the node's (snapshot-rate=); nil: no bound
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
	limit    int  // rows the next chunk reads (first)
	sized    bool // a chunk read rows: limit is sized by them
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
	turn     paced     // under o.Pace
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
	r.turn.cancel(time.Now())
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
		if n, ok := r.paced(time.Now()); ok {
			r.mu.Unlock()
			r.fetchWhole(n)
			r.mu.Lock()
		}
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
		now := time.Now()
		n, start := 0, len(r.chunks) == 0 && !r.copied.Done && now.After(r.retryAt)
		if start {
			n, start = r.paced(now)
		}
		r.mu.Unlock()
		if start {
			r.startWhole(n)
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

// maybeFetch starts reading the next chunk in the background when fewer
// than chunksInFlight are in flight and the range may hold more: the
// rows after the last chunk in flight, or after what is copied. r.mu is
// held.
func (r *CopyReader) maybeFetch() {
	now := time.Now()
	if r.fetching || r.copied.Done || len(r.chunks) >= chunksInFlight || len(r.out) > 0 || now.Before(r.retryAt) {
		return
	}
	from, ok := r.nextFrom()
	if !ok || !r.o.Slots.take() {
		return // the range ends with the last chunk; or this node holds enough chunks
	}
	n, ok := r.paced(now)
	if !ok {
		r.o.Slots.give() // the snapshot's rate on this node is spent for now
		return
	}
	ask := ChunkAsk{Rows: n, Most: n}
	if !r.sized && r.o.Pace == nil {
		// The rows' size is not known: the chunk may read on once its
		// first rows tell it (under a pace, it reads what was reserved).
		ask.Most = r.o.ChunkRows
	}
	r.fetching = true
	r.fetches.Add(1)
	go r.fetch(from, ask)
}

// sizeAfter sizes the next chunk by the rows of c.
func (r *CopyReader) sizeAfter(c *Chunk) {
	r.limit = nextChunkRows(c, r.o.ChunkRows)
	r.sized = r.sized || c.sized()
}

// paced says whether the copy's next read may begin now under the
// snapshot's rate on this node (snapshot-rate=), and how many rows it
// reads: those reserved for it, which it spends; false: they are
// reserved, and it waits for them. r.mu is held.
func (r *CopyReader) paced(now time.Time) (int, bool) {
	n, ok := r.turn.ready(r.o.Pace, r.limit, now)
	if ok {
		r.turn.begin()
	}
	return n, ok
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
		from = last.Through(from)
		if from.Key == "" {
			from.Key = last.KeyCols // the copy's first chunk is in flight: the next goes by its key
		}
	}
	return from, true
}

// fetch reads a chunk of the span after from between its watermarks; it
// joins the chunks in flight before its low watermark is written, so the
// reader knows it when the watermark comes.
func (r *CopyReader) fetch(from model.CopyProgress, ask ChunkAsk) {
	defer r.fetches.Done()
	ctx, cancel := context.WithTimeout(r.ctx, chunkTimeout)
	defer cancel()
	var registered *Chunk
	c, err := r.o.Chunks.ReadChunk(ctx, r.span, from, ask, func(c *Chunk) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if want, ok := r.nextFrom(); !ok || want.To != from.To || want.Cursor != from.Cursor || want.Only != from.Only || want.Done {
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
		r.sizeAfter(c)
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
// watermark on its way through the stream, or a fetch is under way. Not
// while the next chunk waits for the snapshot's rate: its dispatcher
// backs off meanwhile (to 160 ms), as a quiet partition's does, rather
// than read the log every 20 ms for a wait of up to a second.
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
