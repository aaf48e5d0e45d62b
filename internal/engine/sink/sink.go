// Package sink defines where changes go and the contract every sink keeps
// with the dispatchers that feed it: the two-stage ack.
//
//   - Write returns once the batch is enqueued (the wake ack): the
//     dispatcher may send its next batch.
//   - The batch's OnFlushed runs once every event of it is durable (the
//     flush ack): only then may the dispatcher's checkpoint pass it.
//
// Implementations live in subpackages (storage, kafka, blackhole). This
// package imports model and engine/row only.
package sink

import (
	"context"
	"errors"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Batch is a run of DML events of one dispatcher, in commit-ts order.
type Batch struct {
	// Dispatcher and Epoch name the writer, so a sink can keep each
	// dispatcher's output apart and attribute failures to it.
	Dispatcher string
	Epoch      uint64
	Events     []row.Event
	// Txns are the summaries (row.KindTxn) of the source transactions
	// whose first row is in this partition, read with Events: a sink that
	// writes transaction boundaries writes each as its BEGIN and END. Only
	// a changefeed whose sink asks for them has any.
	Txns []row.Event
	// End is the dispatcher's position after the batch: every event up
	// to it is in this batch or an earlier one. Inside marks a batch that
	// ends inside a transaction returned in parts or inside a snapshot
	// chunk: End does not count the rows it carries yet, so it is no
	// place to resume from (an exactly-once sink commits only at a batch
	// that is not Inside).
	End    Position
	Inside bool
	// OnFlushed is called exactly once: with nil when every event is
	// durable, or with the error that prevented it. It may run on a sink
	// goroutine and must not block.
	OnFlushed func(err error)
}

// Sink is one changefeed's sink on one node, shared by its dispatchers.
type Sink interface {
	// Write enqueues a batch and returns; see the package comment. It
	// blocks only for backpressure (the sink's buffer is full).
	Write(ctx context.Context, b *Batch) error
	// Flush makes everything a dispatcher has written so far durable and
	// returns when it is (its pending OnFlushed callbacks have run). A
	// graceful stop and the DDL barrier use it.
	Flush(ctx context.Context, dispatcher string) error
	// WriteDDL writes a schema change durably. The caller (the DDL
	// barrier) has flushed every DML before it.
	WriteDDL(ctx context.Context, ddl row.Event) error
	// WriteCheckpoint records the changefeed's checkpoint where consumers
	// can see it (the storage sink's metadata file).
	WriteCheckpoint(ctx context.Context, ts model.Ts) error
	// Close flushes nothing: callers flush what they need first.
	Close() error
}

// BarrierFlusher is a Sink that tells the DDL barrier's flush apart from
// the others, to count it (the storage sink's flush reason "ddl"). It
// does what Flush does.
type BarrierFlusher interface {
	FlushForDDL(ctx context.Context, dispatcher string) error
}

// FlushForDDL flushes a dispatcher's rows ahead of a DDL: through
// FlushForDDL where the sink has it, else Flush.
func FlushForDDL(ctx context.Context, s Sink, dispatcher string) error {
	if b, ok := s.(BarrierFlusher); ok {
		return b.FlushForDDL(ctx, dispatcher)
	}
	return s.Flush(ctx, dispatcher)
}

// Position is where a dispatcher stands in its partition's stream: the
// commit ts up to which every event was read, and how far its share of
// the initial snapshot was copied there (the pair a checkpoint is).
type Position struct {
	Ts     model.Ts           `json:"ts"`
	Copied model.CopyProgress `json:"copied,omitzero"`
}

// Later reports whether p is further along than q.
func (p Position) Later(q Position) bool {
	return p.Ts > q.Ts || p.Ts == q.Ts && p.Copied.Beyond(q.Copied)
}

// Writer names a dispatcher to a sink that keeps its own record of what
// each partition made durable.
type Writer struct {
	Dispatcher string // the dispatcher's id, as its batches carry it
	Partition  string // the partition's id: the same in every epoch
	Epoch      uint64
}

// Resumer is a sink that keeps, with the data, a record of how far each
// partition's writes reached (an exactly-once sink). A dispatcher asks
// it before it reads anything: Resume fences every earlier writer of the
// partition (on any node: nothing of theirs can become durable
// afterwards) and returns the position the partition's durable writes
// reached, ok false when none is recorded. The dispatcher resumes from
// the later of it and its checkpoint, so nothing durable is written
// again.
type Resumer interface {
	Resume(ctx context.Context, w Writer) (at Position, ok bool, err error)
}

// Resume asks s where w's partition resumes, if s keeps such a record
// (ok false otherwise).
func Resume(ctx context.Context, s Sink, w Writer) (Position, bool, error) {
	if r, ok := s.(Resumer); ok {
		return r.Resume(ctx, w)
	}
	return Position{}, false, nil
}

// Classified is a sink error that says whether it passes by itself
// (seed 002): a transient one is remedied by recovering the dispatcher
// from its checkpoint; a permanent one needs an operator, and Remedy
// says what to do.
type Classified interface {
	error
	Permanent() bool
	Remedy() string
}

// IsPermanent reports whether err, or an error it wraps, is a permanent
// sink error, and what to do about it. Unclassified errors are transient:
// recovering is tried first, and a recovery that never finishes ends in
// a changefeed restart, never a hang.
func IsPermanent(err error) (bool, string) {
	var c Classified
	if errors.As(err, &c) && c.Permanent() {
		return true, c.Remedy()
	}
	return false, ""
}

// DefaultRecoverTimeout bounds a dispatcher's recovery when the sink
// does not say otherwise.
const DefaultRecoverTimeout = 60 * time.Second

// Tenure is the node's hold on the work it was given (its session
// lease). A sink asks it before each irreversible write: a node frozen
// past its lease wakes with its partitions already running elsewhere, and
// what it held must not land after the new owner's writes.
type Tenure interface {
	// Valid reports, without waiting, that the hold is certain for a
	// while yet.
	Valid() bool
	// Hold returns nil when it is, waiting for a renewal while that is
	// unsure; an error once the hold may be lost. It waits at most until
	// the hold's end.
	Hold(ctx context.Context) error
}

// TransactionMetaOption is the sink URI parameter that asks for source
// transactions' boundaries: every row carries its transaction's id and
// its place in it, and the sink writes a BEGIN and an END record per
// transaction (docs/transactions.md).
const TransactionMetaOption = model.TransactionMetaOption
