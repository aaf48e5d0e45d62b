package source

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// LogSource is a database changefeed's source as its dispatchers see it:
// they read its event log (through Env.Logs: the node's log, or the
// node's that runs the changefeed's reader), wherever that runs. A
// database source embeds it and adds the reader (Puller); it is the seam
// through which database sources read their log, so none of them
// imports the event log itself.
type LogSource struct {
	cf     model.ChangefeedID
	tables []string
	start  model.Ts
	logs   LogReader
	log    *slog.Logger

	mu      sync.Mutex
	lastErr time.Time // of the last warning about DDLs
}

// warnable says whether a warning about an unreachable log may be
// logged now: at most one every few seconds, so an outage shows without
// flooding the log (every partition polls).
func warnable(last *time.Time) bool {
	if time.Since(*last) < 5*time.Second {
		return false
	}
	*last = time.Now()
	return true
}

// NewLogSource returns the log-reading side of a database source.
func NewLogSource(env Env, tables []string, start model.Ts) *LogSource {
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LogSource{cf: env.Changefeed, tables: tables, start: start, logs: env.Logs, log: log}
}

// readTimeout bounds one remote read of schema changes (DDLs takes no
// context): a dispatcher asks again on its next pass.
const readTimeout = 10 * time.Second

// Tables implements Source.
func (s *LogSource) Tables(context.Context) ([]string, error) { return s.tables, nil }

// Boundaries implements Source: a table starts as one partition;
// operators split it at keys of their choice.
func (s *LogSource) Boundaries(context.Context, string, int) ([]string, error) { return nil, nil }

// Start implements Source.
func (s *LogSource) Start() model.Ts { return s.start }

// Resolved implements Source: readers stop at the log's resolved
// position themselves, so dispatchers may ask for everything.
func (s *LogSource) Resolved() model.Ts { return model.Ts(math.MaxInt64) }

// Close implements Source.
func (s *LogSource) Close() error { return nil }

// DDLs implements Source. When the log cannot be reached it
// returns none: reads stop before the table's next schema change anyway,
// so the dispatcher meets it on a later pass.
func (s *LogSource) DDLs(table string, from, upTo model.Ts) []Event {
	if s.logs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	evs, err := s.logs.DDLs(ctx, s.cf, table, from, upTo)
	if err != nil {
		s.mu.Lock()
		warn := warnable(&s.lastErr)
		s.mu.Unlock()
		if warn {
			s.log.Warn("cannot read schema changes from the event log; will retry", "changefeed", s.cf, "table", table, "err", err)
		}
		return nil
	}
	return evs
}

// Open implements Source.
func (s *LogSource) Open(span model.Span, from model.Ts) (Reader, error) {
	return &LogSpanReader{s: s, span: span, pos: Cursor{Done: from}}, nil
}

// OpenMarked opens a reader that also returns the snapshot's watermarks
// of its table (KindMark events), each ending a read: for readers that
// copy rows between them.
func (s *LogSource) OpenMarked(span model.Span, from model.Ts) *LogSpanReader {
	return &LogSpanReader{s: s, span: span, pos: Cursor{Done: from}, marks: true}
}

// LogSpanReader reads one span from the log.
type LogSpanReader struct {
	s     *LogSource
	span  model.Span
	marks bool // return watermarks

	mu  sync.Mutex
	pos Cursor
}

func (r *LogSpanReader) Position() model.Ts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos.Done
}

// StepOver implements DDLStepper.
func (r *LogSpanReader) StepOver(ddl model.Ts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pos.Inside() && r.pos.Done < ddl {
		r.pos = Cursor{Done: ddl}
	}
}

// Inside implements Parted.
func (r *LogSpanReader) Inside() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos.Inside()
}

// Changed implements Notifier.
func (r *LogSpanReader) Changed() <-chan struct{} {
	if w, ok := r.s.logs.(LogWatcher); ok {
		return w.Changed(r.s.cf)
	}
	return nil
}

// Read implements Reader: a failed read returns its error and keeps
// the position (the caller reads again on its next pass).
func (r *LogSpanReader) Read(ctx context.Context, upTo model.Ts, maxRows int) ([]Event, error) {
	return readOnPastMarks(ctx, func() ([]Event, int, error) { return r.read(ctx, upTo, maxRows) }, nil)
}

// read reads once; it returns the events and how many watermarks it
// left out.
func (r *LogSpanReader) read(ctx context.Context, upTo model.Ts, maxRows int) ([]Event, int, error) {
	if r.s.logs == nil {
		return nil, 0, nil
	}
	r.mu.Lock()
	pos := r.pos
	r.mu.Unlock()
	evs, next, err := r.s.logs.Read(ctx, r.s.cf, r.span, pos, upTo, maxRows)
	if err != nil {
		return nil, 0, fmt.Errorf("read the event log of %s: %w", r.span.String(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pos.Before(next) {
		r.pos = next
	}
	if r.marks {
		return evs, 0, nil
	}
	kept := evs[:0]
	for _, e := range evs {
		if e.Kind != KindMark {
			kept = append(kept, e)
		}
	}
	return kept, len(evs) - len(kept), nil
}
