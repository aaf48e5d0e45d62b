package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrCleanupPending refuses a changefeed whose name a removed one still
// has a source cleanup under.
var ErrCleanupPending = errors.New("a removed changefeed of this name still holds its replication slot")

// cleanupTry bounds one attempt at one source.
const cleanupTry = 10 * time.Second

// retryCleanups releases, every c.CleanupEvery for the term, the sources
// removed changefeeds left behind (a PostgreSQL that was unreachable at
// the removal): a slot not dropped holds WAL on the database's disk for
// ever. Each attempt is recorded (attempts, the last error), and a
// release deletes the record. It runs beside the term's loop: an
// unreachable database costs its attempt's timeout there, not here.
func (c *Coordinator) retryCleanups(ctx context.Context, term election.Term) {
	every(ctx, c.CleanupEvery, func() {
		st := c.view.State()
		var wg sync.WaitGroup
		for id, e := range st.Cleanups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.retryCleanup(ctx, term, id, e)
			}()
		}
		wg.Wait()
	})
}

// every runs f every d until ctx ends (d <= 0: never).
func every(ctx context.Context, d time.Duration, f func()) {
	if d <= 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

func (c *Coordinator) retryCleanup(ctx context.Context, term election.Term, id model.ChangefeedID, e meta.CleanupEntry) {
	rec := e.Record
	// A create's record is its own while it runs, and for CreateGrace
	// after it began: a coordinator that lost its term mid-create may
	// still be pinning (it releases what it pinned when its write is
	// fenced).
	if _, running := c.creating.Load(id); rec.Create && (running || time.Since(rec.Since) < c.CreateGrace) {
		return
	}
	// The view may lag: a cleanup released and forgotten since, and its
	// name taken by a new changefeed, would drop the new one's slot.
	if still, err := c.store.CleanupAt(ctx, id, e.Revision); err != nil || !still {
		return
	}
	// Nor is what a live changefeed holds released (one created before
	// claims were checked at create may share it).
	theirs := sources.Claims(rec.Source, id)
	st := c.view.State()
	for _, cf := range st.ChangefeedIDs() {
		for _, claim := range sources.Claims(st.Changefeeds[cf].Info.SourceURI, cf) {
			if slices.Contains(theirs, claim) {
				c.log.Warn("coordinator: a removed changefeed's source is not released while a live changefeed holds the same upstream resource", "changefeed", id, "holder", cf, "resource", claim)
				return
			}
		}
	}
	tctx, cancel := context.WithTimeout(ctx, cleanupTry)
	err := sources.Remove(tctx, rec.Source)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		if ferr := c.store.ForgetCleanup(ctx, term.Fence, id); ferr == nil {
			c.log.Info("coordinator: a removed changefeed's (or a create cut short's) replication slot and publication are released", "changefeed", id, "create", rec.Create, "attempts", rec.Attempts+1, "pending_for", time.Since(rec.Since).Round(time.Second))
		}
		return
	}
	rec.Attempts++
	rec.LastError, rec.LastTry = err.Error(), time.Now().UTC()
	if serr := c.store.SaveCleanup(ctx, term.Fence, rec, e.Revision); serr != nil && !errors.Is(serr, meta.ErrStale) {
		c.log.Warn("coordinator: could not record a source cleanup's attempt", "changefeed", id, "err", serr)
	}
	// Every attempt for the first few, then one in twenty (every five
	// minutes by default): a database down for a day must not fill the
	// log.
	if rec.Attempts <= 3 || rec.Attempts%20 == 0 {
		c.log.Warn("coordinator: a removed changefeed's (or a create cut short's) replication slot is not released yet; retrying", "changefeed", id, "create", rec.Create, "source", sources.Redact(rec.Source), "attempts", rec.Attempts, "err", err)
	}
}

// cleanupText describes a pending cleanup for an error.
func cleanupText(rec model.SourceCleanup) string {
	s := fmt.Sprintf("changefeed %s was removed at %s and its source %s is not released yet", rec.Changefeed, rec.Since.Format(time.RFC3339), sources.Redact(rec.Source))
	if rec.Create {
		s = fmt.Sprintf("a create of changefeed %s began at %s and has not finished: it is running, or it was cut short and what it pinned on %s is not released yet", rec.Changefeed, rec.Since.Format(time.RFC3339), sources.Redact(rec.Source))
	}
	if rec.LastError != "" {
		s += fmt.Sprintf(" (%d attempts; last: %s)", rec.Attempts, rec.LastError)
	}
	return s + "; the coordinator retries until the database can be reached: wait, or choose another name"
}
