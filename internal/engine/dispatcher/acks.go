package dispatcher

// The sink side of a dispatcher: the batches it writes, their flush acks,
// which move the checkpoint over every durable batch at the front, the
// drain that waits for them, and its half of the DDL barrier.

import (
	"context"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// write sends a batch (possibly empty, to move the checkpoint over a
// quiet stretch) and records it as in flight until its flush ack.
func (d *Dispatcher) write(ctx context.Context, evs []source.Event) error {
	b := &inflightBatch{end: d.reader.Position(), copied: d.cfg.Copied}
	if c, ok := d.reader.(source.Copying); ok {
		b.copied = c.Copied()
	}
	d.mu.Lock()
	d.inflight = append(d.inflight, b)
	d.mu.Unlock()
	if len(evs) == 0 {
		d.ack(b, nil)
		return nil
	}
	evs, txns := splitTxns(evs)
	return d.cfg.Sink.Write(ctx, &sink.Batch{
		Dispatcher: d.cfg.ID, Epoch: d.cfg.Epoch, Events: evs, Txns: txns,
		End: sink.Position{Ts: b.end, Copied: b.copied}, Inside: d.inside(),
		OnFlushed: func(err error) { d.ack(b, err) },
	})
}

// splitTxns takes the transactions' summaries (KindTxn: only a sink that
// writes transaction boundaries has its log add them) out of a read's
// rows. The rows stay in place and in order.
func splitTxns(evs []source.Event) ([]source.Event, []source.Event) {
	n := 0
	for i := range evs {
		if evs[i].Kind == source.KindTxn {
			n++
		}
	}
	if n == 0 {
		return evs, nil
	}
	rows, txns := make([]source.Event, 0, len(evs)-n), make([]source.Event, 0, n)
	for _, e := range evs {
		if e.Kind == source.KindTxn {
			txns = append(txns, e)
		} else {
			rows = append(rows, e)
		}
	}
	return rows, txns
}

// ack marks a batch durable and moves the checkpoint over every durable
// batch at the front: the checkpoint never passes an unflushed batch.
func (d *Dispatcher) ack(b *inflightBatch, err error) {
	copiedNow := false
	d.mu.Lock()
	if err != nil {
		if d.failure == nil {
			d.failure = fmt.Errorf("dispatcher %s: sink failed: %w", d.cfg.ID, err)
		}
	} else {
		b.done = true
		for len(d.inflight) > 0 && d.inflight[0].done {
			// max: a quiet stretch may have reported past a batch's end
			// (never past an event: the batch holds none before it).
			d.checkpoint = max(d.checkpoint, d.inflight[0].end)
			copiedNow = copiedNow || !d.copied.Done && d.inflight[0].copied.Done
			d.copied = d.inflight[0].copied
			d.inflight = d.inflight[1:]
		}
	}
	d.mu.Unlock()
	if copiedNow && d.cfg.OnCopied != nil {
		d.cfg.OnCopied()
	}
	select {
	case d.acked <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failure
}

// drain flushes everything written and waits for the acks. forDDL: the
// flush is a DDL barrier's (the sink may count it apart).
func (d *Dispatcher) drain(ctx context.Context, forDDL bool) (model.Ts, error) {
	flush := d.cfg.Sink.Flush
	if forDDL {
		flush = func(ctx context.Context, id string) error { return sink.FlushForDDL(ctx, d.cfg.Sink, id) }
	}
	if err := flush(ctx, d.cfg.ID); err != nil {
		return d.Checkpoint(), fmt.Errorf("dispatcher %s: final flush: %w", d.cfg.ID, err)
	}
	for {
		d.mu.Lock()
		empty, cp, failure := len(d.inflight) == 0, d.checkpoint, d.failure
		d.mu.Unlock()
		if failure != nil {
			return cp, failure
		}
		if empty {
			return cp, nil
		}
		select {
		case <-d.acked:
		case <-ctx.Done():
			return cp, ctx.Err()
		}
	}
}

// passDDL is the dispatcher's half of the DDL barrier: make every DML
// before the DDL durable, then let the barrier (or, alone, this
// dispatcher) write it.
func (d *Dispatcher) passDDL(ctx context.Context, ddl source.Event) error {
	if _, err := d.drain(ctx, true); err != nil {
		return err
	}
	if d.cfg.Barrier != nil {
		// Waiting at the barrier must not hold up a graceful stop.
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-d.stopReq:
				cancel()
			case <-bctx.Done():
			}
		}()
		return d.cfg.Barrier.Reached(bctx, d.cfg.ID, ddl)
	}
	return d.cfg.Sink.WriteDDL(ctx, ddl)
}
