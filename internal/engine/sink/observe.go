package sink

import (
	"context"
	"time"
)

// Observer receives what a sink did, for metrics. Its methods must be
// cheap and must not block: they run on the write and flush paths.
type Observer interface {
	// Flushed: a batch of events became durable (err nil) or failed,
	// bytes of row payload (keys and column values) after d since its
	// Write.
	Flushed(events, bytes int, d time.Duration, err error)
}

// Observe wraps a sink so that every batch's flush is reported to obs.
func Observe(s Sink, obs Observer) Sink {
	if obs == nil {
		return s
	}
	return &observed{Sink: s, obs: obs}
}

type observed struct {
	Sink
	obs Observer
}

func (o *observed) Write(ctx context.Context, b *Batch) error {
	size := 0
	for i := range b.Events {
		size += b.Events[i].Size()
	}
	began, events, done := time.Now(), len(b.Events), b.OnFlushed
	wrapped := *b
	wrapped.OnFlushed = func(err error) {
		o.obs.Flushed(events, size, time.Since(began), err)
		done(err)
	}
	return o.Sink.Write(ctx, &wrapped)
}

// Forget tells the sink, if it keeps state per dispatcher, that the
// dispatcher is gone.
func Forget(s Sink, dispatcher string) {
	if f, ok := s.(Forgetter); ok {
		f.Forget(dispatcher)
	}
}

// Forgetter is a sink that keeps state per dispatcher.
type Forgetter interface {
	Forget(dispatcher string)
}

// Forget implements Forgetter for the sink it wraps.
func (o *observed) Forget(dispatcher string) { Forget(o.Sink, dispatcher) }

// FlushForDDL passes the barrier's flush on, so that the wrapped sink
// still tells it apart.
func (o *observed) FlushForDDL(ctx context.Context, dispatcher string) error {
	return FlushForDDL(ctx, o.Sink, dispatcher)
}

// Resume passes a dispatcher's resume on (an exactly-once sink's).
func (o *observed) Resume(ctx context.Context, w Writer) (Position, bool, error) {
	return Resume(ctx, o.Sink, w)
}
