// Package coordinator holds the work of the elected node: keeping the
// liveness records in step with membership, placing each changefeed's
// maintainer, and the changefeed operations of the API (create, pause,
// resume, update its tables, remove), and running submitted plans through
// exec.
//
// It imports model, plan, exec, engine/meta, engine/cluster and
// engine/election, and the source and sink registries to validate a
// changefeed before anything is written; it must never import api, agent
// or cli. Every write it makes is fenced with the term it was elected
// with.
package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
)

// Coordinator does the elected node's work.
type Coordinator struct {
	store *meta.Store
	view  *cluster.View
	log   *slog.Logger
	// StallAfter is how long a plan may make no progress before a
	// stalled event names what is stuck.
	StallAfter time.Duration
	// Retention bounds the finished plans kept in etcd.
	Retention Retention
	// SinkRoot is the directory file:// sinks of new changefeeds must be
	// under (this agent's --sink-root); "" allows any.
	SinkRoot string
	// SpoolDir is where a new changefeed's disk spool is tried when its
	// sink URI names no spool-dir (the agent's data directory).
	SpoolDir string

	// ReleaseWait bounds how long a removal waits to release what the
	// changefeed's source holds upstream (its reader, stopping as its
	// node sees the removal, may hold the slot a moment); CleanupEvery
	// is how often a release that did not happen then is tried again.
	ReleaseWait, CleanupEvery time.Duration
	// CreateGrace is how long a create's record (meta.Store.BeginCreate)
	// is left to the create before the retries release what it pinned:
	// longer than a create runs, since a coordinator that lost its term
	// mid-create may still be pinning.
	CreateGrace time.Duration
	// FollowEvery is how often changefeeds with table rules match them
	// again (follow.go; 0: never); FollowWait bounds the wait for their
	// dispatchers to stop when their tables change.
	FollowEvery, FollowWait time.Duration

	// submitting serializes submissions: each one checks the plans not
	// yet over before it stores its own.
	submitting sync.Mutex
	// retabling serializes the changes of a changefeed's tables
	// (updates, re-snapshots; the operator's and the coordinator's own):
	// each adds to the publication before it writes etcd (undone when
	// the write fails) and takes out of it after, which must not undo or
	// take out another's change made in between. A lock by changefeed,
	// kept while someone holds or wants it (lockTables).
	retabling tableLocks
	// creating are the changefeeds whose create runs here: their create
	// records (BeginCreate) are not cleanups to retry yet.
	creating sync.Map
	// afterPin, in tests, runs as a create has pinned its source.
	afterPin func()
}

// New returns a coordinator over a store and this node's view.
func New(store *meta.Store, view *cluster.View, log *slog.Logger) *Coordinator {
	return &Coordinator{store: store, view: view, log: log, StallAfter: 30 * time.Second, Retention: DefaultRetention,
		ReleaseWait: 20 * time.Second, CleanupEvery: 15 * time.Second, CreateGrace: 3 * createTimeout / 2, FollowEvery: 30 * time.Second, FollowWait: 30 * time.Second}
}

// Lead runs for one term, until ctx ends or a write finds the term over.
func (c *Coordinator) Lead(ctx context.Context, term election.Term) {
	mine := newSaved()
	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, stopCleanups := context.WithCancel(ctx)
	defer stopCleanups()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.retryCleanups(cctx, term)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.followFilters(cctx, term)
	}()
	var pruned time.Time
	for ctx.Err() == nil {
		ch := c.view.Changed()
		began := time.Now()
		err := c.cleanupLiveness(ctx, term)
		if perr := c.placeMaintainers(ctx, term, c.view.State()); err == nil {
			err = perr
		}
		active, perr := c.runPlans(ctx, term, c.view.State(), mine)
		if err == nil {
			err = perr
		}
		if derr := c.driveDrain(ctx, term, c.view.State()); err == nil {
			err = derr
		}
		// Pruning decodes every finished plan: when one ends, and once a
		// minute for age.
		if now := time.Now(); *mine.ended || now.Sub(pruned) >= time.Minute {
			pruned, *mine.ended = now, false
			if perr := c.prunePlans(ctx, term, c.view.State(), mine, now); err == nil {
				err = perr
			}
		}
		if err = c.store.WhyRefused(ctx, term.Fence, err); errors.Is(err, meta.ErrFenced) {
			c.log.Warn("coordinator: term is over, stopping", "epoch", term.Epoch())
			return
		}
		cluster.Rest(ctx, time.Since(began))
		// A failed write is retried even if nothing else changes.
		var retry <-chan time.Time
		if err != nil {
			retry = time.After(time.Second)
		}
		// Plans and drains are driven on a clock too: a batch's maintainer
		// moves settle with time, and stalls are noticed on it.
		var tick <-chan time.Time
		if active || c.view.State().Drain != nil {
			tick = time.After(200 * time.Millisecond)
		}
		select {
		case <-ch:
		case <-retry:
		case <-tick:
		case <-ctx.Done():
		}
	}
}

// cleanupLiveness deletes the liveness records of nodes that are gone:
// their registration expired with their lease, so their lifecycle is over.
func (c *Coordinator) cleanupLiveness(ctx context.Context, term election.Term) error {
	st := c.view.State()
	var firstErr error
	for id, l := range st.Liveness {
		if _, registered := st.Nodes[id]; registered {
			continue
		}
		deleted, err := c.store.DeleteStaleLiveness(ctx, term.Fence, id, l.Revision)
		if err != nil {
			if errors.Is(err, meta.ErrFenced) {
				return err
			}
			if ctx.Err() == nil {
				c.log.Warn("coordinator: could not clean up liveness of a departed node; will retry", "node", id, "err", err)
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if deleted {
			c.log.Info("coordinator: node left the cluster; liveness record removed", "node", id, "last_liveness", l.Record.State)
		}
	}
	return firstErr
}
