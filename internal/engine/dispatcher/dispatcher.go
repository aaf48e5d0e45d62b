// Package dispatcher is the runtime of one partition on one node: it
// reads the partition's key range from the source, starting exactly after
// its checkpoint, and writes it to the sink with the two-stage ack. Its
// checkpoint advances only over batches the sink reports durable.
//
// A graceful stop (move, split, drain) stops reading, waits until
// everything read is durable and returns that exact position, where the
// next owner starts: graceful moves are exactly-once. A crash leaves the
// checkpoint where the last flush ack put it: at-least-once.
//
// It imports model, actor, checkpoint, cluster, eventlog, meta,
// transport, source and sink (and their registries); never the
// maintainer or coordinator.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Source is what a dispatcher reads: DML of a key range, and the DDLs of
// its table.
type Source interface {
	Open(span model.Span, from model.Ts) (source.Reader, error)
	DDLs(table string, from, upTo model.Ts) []source.Event
}

// Barrier decides when a DDL may be written: every dispatcher of the table
// reports it has made all DML before the DDL durable, one writes it, all
// pass. Reached blocks until the DDL is written.
type Barrier interface {
	Reached(ctx context.Context, dispatcher string, ddl source.Event) error
}

// Config describes one dispatcher.
type Config struct {
	// ID names this dispatcher in the sink: the partition id and the
	// epoch of this placement, e.g. "p7.3", so a re-created dispatcher
	// never shares files with an earlier one.
	ID    string
	Epoch uint64
	Span  model.Span
	// Start is the checkpoint to resume from: events after it are read.
	Start model.Ts
	// Copied is how far the partition's share of the initial snapshot was
	// at Start (a source.Copier's readers copy the rest).
	Copied model.CopyProgress
	Source Source
	Sink   sink.Sink
	// Barrier coordinates DDLs; nil means this dispatcher is the table's
	// only one and writes DDLs itself.
	Barrier Barrier
	// Now is the source's resolved ts: every event up to it is final.
	Now func() model.Ts
	// BatchSize caps events per sink write; Idle is the pause when there is
	// nothing new to read.
	BatchSize int
	Idle      time.Duration
	// Log receives the warnings of reads that fail; nil discards them.
	Log *slog.Logger
	// OnCopied, if set, is called once the partition's share of the
	// initial snapshot is durable in the sink (from the sink's ack; it
	// must not block).
	OnCopied func()
	// WakeGap, if set, lets a partition with nothing to read wake when
	// its reader's log changes (source.Notifier), no sooner than the gap
	// it returns after its last read; nil: it waits out its back-off.
	WakeGap func() time.Duration
}

// Dispatcher is one running partition.
type Dispatcher struct {
	cfg    Config
	reader source.Reader

	mu         sync.Mutex
	inflight   []*inflightBatch // written, not yet flush-acked, in order
	checkpoint model.Ts
	copied     model.CopyProgress // as of checkpoint
	failure    error
	acked      chan struct{} // signalled on every ack

	// quiet, while the loop sleeps on a Lookahead source, is the last ts
	// before the span's next event or DDL: nothing commits up to it, so
	// with nothing in flight the checkpoint may report up to it (the
	// source's clock permitting). 0 when not sleeping so.
	quiet model.Ts

	lastReadWarn time.Time // of the last warning about a failed read

	stopReq  chan struct{}
	stopOnce sync.Once
	finished chan struct{}
	final    model.Ts
	runErr   error
}

type inflightBatch struct {
	end    model.Ts           // reader position after the batch
	copied model.CopyProgress // the reader's copy progress there
	done   bool
}

// New opens the dispatcher's reader at its start position.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ID == "" || cfg.Source == nil || cfg.Sink == nil || cfg.Now == nil {
		return nil, errors.New("dispatcher: ID, Source, Sink and Now are required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.Idle <= 0 {
		cfg.Idle = defaultIdle
	}
	var r source.Reader
	var err error
	if c, ok := cfg.Source.(source.Copier); ok {
		r, err = c.OpenCopying(cfg.Span, cfg.Start, cfg.Copied)
	} else {
		r, err = cfg.Source.Open(cfg.Span, cfg.Start)
	}
	if err != nil {
		return nil, fmt.Errorf("dispatcher %s: %w", cfg.ID, err)
	}
	return &Dispatcher{
		cfg: cfg, reader: r, checkpoint: cfg.Start, copied: cfg.Copied, acked: make(chan struct{}, 1),
		stopReq: make(chan struct{}), finished: make(chan struct{}),
	}, nil
}

// ID is the dispatcher's id.
func (d *Dispatcher) ID() string { return d.cfg.ID }

// Span is the key range it serves.
func (d *Dispatcher) Span() model.Span { return d.cfg.Span }

// Checkpoint is the position up to which everything is durable in the sink.
func (d *Dispatcher) Checkpoint() model.Ts {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.foldQuiet()
	return d.checkpoint
}

// Copied is how far the partition's copy is as of Checkpoint(): with the
// checkpoint, it is the partition's progress.
func (d *Dispatcher) Copied() model.CopyProgress {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.copied
}

// Progress is the checkpoint and the copy's progress there, read
// together.
func (d *Dispatcher) Progress() (model.Ts, model.CopyProgress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.foldQuiet()
	return d.checkpoint, d.copied
}

// foldQuiet moves the checkpoint over a quiet stretch the loop sleeps
// through: up to now, or to just before the next event, whichever is
// first. d.mu must be held.
func (d *Dispatcher) foldQuiet() {
	if d.quiet != 0 && len(d.inflight) == 0 {
		d.checkpoint = max(d.checkpoint, min(d.cfg.Now(), d.quiet))
	}
}

func (d *Dispatcher) setQuiet(until model.Ts) {
	d.mu.Lock()
	d.foldQuiet()
	d.quiet = until
	d.mu.Unlock()
}

// maxQuiet bounds one sleep on a Lookahead source.
const maxQuiet = 5 * time.Second

// quietFor says how long the loop may sleep with nothing to read, and the
// last ts before the next event or DDL of its span, when the source can
// tell (ok false: it cannot; poll).
func (d *Dispatcher) quietFor() (time.Duration, model.Ts, bool) {
	la, ok := d.reader.(source.Lookahead)
	if !ok {
		return 0, 0, false
	}
	sch, ok := d.cfg.Source.(source.DDLSchedule)
	if !ok {
		return 0, 0, false // DDLs it cannot foresee: poll
	}
	next, has := la.NextAt()
	if ddl, ok := sch.NextDDL(d.cfg.Span.Table, d.reader.Position()); ok && (!has || ddl < next) {
		next, has = ddl, true
	}
	if !has {
		return maxQuiet, model.Ts(math.MaxUint64 >> 1), true
	}
	wait := time.Duration(next.Millis()-d.cfg.Now().Millis()) * time.Millisecond
	return min(max(wait, d.cfg.Idle), maxQuiet), next - 1, true
}

// Run reads and writes until ctx ends (a crash-like stop: nothing more is
// flushed), Stop is called (graceful), or the sink fails. It returns nil
// after a graceful stop.
func (d *Dispatcher) Run(ctx context.Context) error {
	if c, ok := d.reader.(source.Closer); ok {
		defer c.Close()
	}
	err := d.loop(ctx)
	if err != nil && ctx.Err() == nil {
		// Before reporting a sink failure, let every message still in
		// flight settle: the successor starts from the checkpoint, and
		// nothing of this dispatcher may land after it has begun.
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = d.cfg.Sink.Flush(sctx, d.cfg.ID)
		cancel()
	}
	if err == nil {
		// Graceful: everything read must be durable before the position
		// is handed over.
		var final model.Ts
		final, err = d.drain(ctx, false)
		d.final = final
	}
	d.runErr = err
	close(d.finished)
	return err
}

// Stop asks for a graceful stop and waits for it: it returns the exact
// position up to which everything is durable, where the next owner of the
// partition must start.
func (d *Dispatcher) Stop(ctx context.Context) (model.Ts, error) {
	d.stopOnce.Do(func() { close(d.stopReq) })
	select {
	case <-d.finished:
		if d.runErr != nil {
			return d.Checkpoint(), d.runErr
		}
		return d.final, nil
	case <-ctx.Done():
		return d.Checkpoint(), ctx.Err()
	}
}

// inside says the reader stands inside a large transaction it returns in
// parts: stopping there would leave its position before rows already
// written, which the next owner would write again.
func (d *Dispatcher) inside() bool {
	p, ok := d.reader.(source.Parted)
	return ok && p.Inside()
}

func (d *Dispatcher) stopping() bool {
	select {
	case <-d.stopReq:
		return true
	default:
		return false
	}
}

// defaultIdle is Config.Idle's default.
const defaultIdle = 20 * time.Millisecond

// maxIdleFactor bounds an idle partition's back-off: at most 8 × Idle
// (160ms by default) between polls, well under a sink's flush interval.
const maxIdleFactor = 8

func (d *Dispatcher) loop(ctx context.Context) error {
	// An idle partition backs off, doubling its pause up to maxIdleFactor
	// times Idle: thousands of quiet partitions polling every 20ms would
	// keep a node's CPU busy (a 5,000-partition profile spent a third of
	// its time here). The first event brings the pause back to Idle.
	idle := d.cfg.Idle
	for {
		if d.stopping() && !d.inside() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := d.failed(); err != nil {
			return err
		}
		pos := d.reader.Position()
		// Taken before the read: a change after it closes this one.
		changed := d.changed()
		readAt := time.Now()
		upTo := d.cfg.Now()
		var ddl *source.Event
		if ddls := d.cfg.Source.DDLs(d.cfg.Span.Table, pos, upTo); len(ddls) > 0 {
			// Read only up to just before the next DDL: the position (and
			// so the checkpoint) passes a DDL only once it is written, so
			// a restart in between meets the DDL again.
			ddl = &ddls[0]
			upTo = ddl.CommitTs - 1
		}
		evs := d.read(ctx, upTo)
		if len(evs) > 0 || d.reader.Position() > pos {
			if err := d.write(ctx, evs); err != nil {
				return err
			}
		}
		if ddl != nil && d.reader.Position() >= ddl.CommitTs-1 {
			if err := d.passDDL(ctx, *ddl); err != nil {
				if d.stopping() {
					// Stopped while waiting at the barrier: everything
					// before the DDL is durable; the next owner meets it.
					return nil
				}
				return err
			}
			// Step over the DDL itself (no DML shares its ts).
			if st, ok := d.reader.(source.DDLStepper); ok {
				st.StepOver(ddl.CommitTs)
			}
			if err := d.write(ctx, d.read(ctx, ddl.CommitTs)); err != nil {
				return err
			}
			continue
		}
		if len(evs) > 0 {
			idle = d.cfg.Idle
			continue
		}
		// Nothing to read. A source that knows when the span's next event
		// commits lets the loop sleep until then (thousands of quiet
		// partitions then cost nothing), reporting its checkpoint as
		// moving meanwhile; any other is polled with a back-off.
		wait, until, foreseen := d.quietFor()
		if foreseen {
			d.setQuiet(until)
		} else if aw, ok := d.reader.(source.Awaiting); ok && aw.Awaiting() {
			wait, idle = d.cfg.Idle, d.cfg.Idle
		} else {
			wait = idle
			idle = min(2*idle, maxIdleFactor*d.cfg.Idle)
		}
		if foreseen {
			changed = nil // it knows when its next event comes
		}
		d.pause(ctx, wait, changed, readAt)
		if foreseen {
			d.setQuiet(0)
		}
	}
}

// changed is the reader's change signal when the dispatcher may wake on
// it (nil otherwise).
func (d *Dispatcher) changed() <-chan struct{} {
	if d.cfg.WakeGap == nil {
		return nil
	}
	if n, ok := d.reader.(source.Notifier); ok {
		return n.Changed()
	}
	return nil
}

// pause waits wait, or, with changed, until it is closed, but not
// before the wake gap has passed since the read at readAt: thousands of
// partitions of one log wake at each of its changes, and the gap bounds
// how often each reads (a node's gap grows with its partitions).
func (d *Dispatcher) pause(ctx context.Context, wait time.Duration, changed <-chan struct{}, readAt time.Time) {
	// A stop cuts the pause short, but not inside a transaction, which
	// the loop reads on to its end whatever the stop: its request would
	// end every pause at once, and a log without the rest of the
	// transaction yet (its reader started again elsewhere) was read
	// without a pause, a million times a second.
	stop := d.stopReq
	if d.inside() {
		stop = nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	if changed != nil {
		gap := d.cfg.WakeGap() - time.Since(readAt)
		if gap >= wait {
			changed = nil // the back-off ends first anyway
		} else if gap > 0 {
			g := time.NewTimer(gap)
			select {
			case <-ctx.Done():
			case <-stop:
			case <-g.C:
			}
			g.Stop()
		}
	}
	select {
	case <-ctx.Done():
	case <-stop:
	case <-t.C:
	case <-changed:
	}
}

// read reads the next events up to upTo. A failed read reads nothing and
// keeps the position: the loop polls again, and warns at most every few
// seconds, so an outage shows without flooding the log.
//
// A read that gets no answer (the event log of a reader on another node)
// is bounded where it waits, in the event log's client (CallTimeout), so
// that it neither holds a graceful stop nor keeps the loop from its
// other work. Not here: a deadline for every read of every partition
// (timers, their contexts, tens of thousands of reads a second on a
// node of 33,000 quiet partitions) was a twelfth of such a node's CPU.
func (d *Dispatcher) read(ctx context.Context, upTo model.Ts) []source.Event {
	evs, err := d.reader.Read(ctx, upTo, d.cfg.BatchSize)
	if err == nil {
		return evs
	}
	if ctx.Err() == nil && time.Since(d.lastReadWarn) >= 5*time.Second {
		d.lastReadWarn = time.Now()
		d.cfg.Log.Warn("cannot read the event log; will retry", "dispatcher", d.cfg.ID, "err", err)
	}
	return nil
}
