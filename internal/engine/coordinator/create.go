package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A create's record of what it will hold upstream (meta.Store.BeginCreate):
// written before the source is pinned, deleted by the write that creates
// the changefeed, released by the cleanup retries when the create never
// finished.

// beginCreate records the cleanup of what pinning uri for changefeed id
// will hold upstream before it is pinned (meta.Store.BeginCreate): a
// create cut short anywhere after is released by the cleanup retries.
func (c *Coordinator) beginCreate(ctx context.Context, term election.Term, id model.ChangefeedID, uri string, now time.Time, mark *byte) error {
	holding, err := sources.Holding(uri, id)
	if err != nil {
		return refuse(ErrInvalid, "%v", err)
	}
	if _, running := c.creating.LoadOrStore(id, mark); running {
		// Another create of the name runs here (both passed nameFree).
		return refuse(ErrCleanupPending, "a create of changefeed %s is under way: wait for it (cdcctl changefeed get %s)", id, id)
	}
	if holding == "" {
		return nil
	}
	err = c.store.BeginCreate(ctx, term.Fence, model.SourceCleanup{Changefeed: id, Source: holding, Since: now.UTC(), Create: true})
	if errors.Is(err, meta.ErrStale) {
		// A changefeed of the name, or another create's record, went in
		// since the name was checked.
		c.creating.CompareAndDelete(id, mark)
		if rec, ok, cerr := c.store.Cleanup(ctx, id); cerr == nil && ok {
			return refuse(ErrCleanupPending, "%s", cleanupText(rec))
		}
		return refuse(meta.ErrChangefeedExists, "%s", id)
	}
	if err != nil {
		c.creating.CompareAndDelete(id, mark)
	}
	return err
}

// undoCreate releases what a refused create pinned (uri) and forgets its
// create record; a release that fails leaves the record to the cleanup
// retries. A pin that failed ("") is not released, as before create
// records: a slot it found rather than made may be another reader's.
func (c *Coordinator) undoCreate(term election.Term, id model.ChangefeedID, uri string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, recorded, err := c.store.Cleanup(ctx, id)
	if err != nil {
		c.log.Warn("coordinator: a refused create's cleanup record is left to the retries", "changefeed", id, "err", err)
		return
	}
	if !recorded || !rec.Create {
		// A source that holds nothing upstream, or a create whose write
		// landed after all (an ambiguous etcd error): nothing to undo.
		return
	}
	if uri == "" {
		if err := c.store.ForgetCleanup(ctx, term.Fence, id); err != nil {
			c.log.Warn("coordinator: a create whose pin failed left its record; the coordinator retries its release", "changefeed", id, "err", err)
		}
		return
	}
	if err := c.releaseSource(uri); err != nil {
		c.log.Warn("coordinator: a refused create could not release the source it pinned yet; the coordinator retries", "changefeed", id, "source", sources.Redact(uri), "err", err)
		return
	}
	if err := c.store.ForgetCleanup(ctx, term.Fence, id); err != nil {
		c.log.Warn("coordinator: a refused create released its source; its cleanup record stays until the next retry", "changefeed", id, "err", err)
	}
}
