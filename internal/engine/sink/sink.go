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
