package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// tableBarrier is a dispatcher's side of its table's DDL barrier: it waits
// for the maintainer to open the barrier at the DDL; if its partition is
// the writer it writes the DDL and marks the barrier written; all pass
// once it is written.
type tableBarrier struct {
	m    *Manager
	key  string
	sink sink.Sink
}

func (b *tableBarrier) route() (meta.RouteRecord, bool) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	r, ok := b.m.running[b.key]
	if !ok {
		return meta.RouteRecord{}, false
	}
	return r.route, true
}

// notPlacedWait bounds how long a dispatcher taken off this node waits
// at a barrier for its stop request.
const notPlacedWait = 10 * time.Second

// Reached implements Barrier.
func (b *tableBarrier) Reached(ctx context.Context, dispatcher string, ddl source.Event) error {
	for {
		ch := b.m.view.Changed()
		st := b.m.view.State()
		r, ok := b.route()
		if !ok {
			// Taken off this node (a pause, a move): its stop request
			// follows, and the stop is graceful; failing here made it
			// unclean, without a final position, and a pause waiting for
			// every final one (table rules followed) timed out.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(notPlacedWait):
				return fmt.Errorf("dispatcher %s is no longer placed here", dispatcher)
			}
		}
		rec, open := st.Barriers[r.Route.Changefeed][ddl.Table]
		if open && rec.Barrier.DDLTs > ddl.CommitTs {
			return nil // the table is already past this DDL
		}
		if open && rec.Barrier.DDLTs == ddl.CommitTs {
			if rec.Barrier.Written {
				return nil
			}
			if rec.Barrier.Writer == r.Route.ID {
				// ctx ends when the dispatcher is asked to stop, which
				// ends the waiting; but a write that has begun finishes,
				// and is marked, or the next owner would write the DDL
				// again.
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				err := b.sink.WriteDDL(wctx, ddl)
				if err == nil {
					err = b.m.store.MarkBarrierWritten(wctx, r.Route.Changefeed, rec)
				}
				cancel()
				if err == nil {
					b.m.log.Info("DDL written for the whole table", "table", ddl.Table, "ddl_ts", ddl.CommitTs, "writer", dispatcher)
					return nil
				}
				if !errors.Is(err, meta.ErrStale) {
					return err
				}
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
