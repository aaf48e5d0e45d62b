package maintainer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A database changefeed has one upstream reader (source.Puller), placed
// and fenced like its maintainer: it runs on the maintainer's node under
// the maintainer's placement, fills an event log that dispatchers
// everywhere read, and resumes from the position persisted with the
// checkpoint when the maintainer moves or its node dies.

// pulling is one changefeed's reader on this host.
type pulling struct {
	info   model.ChangefeedInfo // the incarnation it reads for
	epoch  uint64
	run    uint64 // the changefeed's resumes: each starts a new run
	puller source.Puller
	cancel context.CancelFunc
	done   chan struct{}

	// kept are the table issues the status held when the reader's log
	// was opened: a resume that named other tables left them (the held
	// ones are held in the log from the start), and they stay reported
	// beside what this run finds.
	mu   sync.Mutex
	kept []model.TableIssue
	// reading is set while a run of the reader reads: only then is what
	// it reports its own (before, kept is not known yet).
	reading bool
	// stored is the last resume point this host stored and confirmed
	// upstream, with its checkpoint. A run tried again starts from it
	// when the view of etcd has not caught up with the write yet: the
	// upstream has forgotten what precedes it (PostgreSQL's slot
	// begins there), and an older point would be refused as a gap.
	stored   source.Position
	storedAt model.Ts
}

// runPullers starts the readers of the database changefeeds this node
// maintains (and that are not paused) and stops the others.
func (h *Host) runPullers(ctx context.Context, st *meta.State) {
	want := map[model.ChangefeedID]*meta.ChangefeedEntry{}
	for _, cf := range st.ChangefeedIDs() {
		e := st.Changefeeds[cf]
		if e.Maintainer.Node == h.self && e.MaintainerRevision > 0 && e.Status.State == model.ChangefeedNormal && len(e.Status.SourcePosition) > 0 {
			want[cf] = e
		}
	}
	h.mu.Lock()
	var stopping []*pulling
	for cf, p := range h.pullers {
		e, ok := want[cf]
		if !ok || !e.Info.SameIncarnation(p.info) || e.Maintainer.Epoch != p.epoch || e.Status.Run != p.run {
			stopping = append(stopping, p)
			delete(h.pullers, cf)
		}
	}
	h.mu.Unlock()
	for _, p := range stopping {
		p.cancel()
		<-p.done
	}
	for cf, e := range want {
		h.mu.Lock()
		_, running := h.pullers[cf]
		h.mu.Unlock()
		if running {
			continue
		}
		src, err := h.source(ctx, e)
		if err != nil {
			h.log.Warn("maintainer: cannot open the source to start its reader; will retry", "changefeed", cf, "err", err)
			continue
		}
		pl, ok := src.(source.Puller)
		if !ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		p := &pulling{info: e.Info, epoch: e.Maintainer.Epoch, run: e.Status.Run, puller: pl, cancel: cancel, done: make(chan struct{})}
		h.mu.Lock()
		h.pullers[cf] = p
		h.mu.Unlock()
		go h.pull(pctx, cf, p)
	}
}

// stopPullers stops every reader (the host is stopping).
func (h *Host) stopPullers() {
	h.mu.Lock()
	all := h.pullers
	h.pullers = map[model.ChangefeedID]*pulling{}
	h.mu.Unlock()
	for _, p := range all {
		p.cancel()
		<-p.done
	}
}

// pull runs one changefeed's reader until ctx ends: each run fills a new
// log from the last persisted resume point; a failed run (the upstream is
// down, the slot still held by a reader that died) is retried with a
// growing pause, and its reason is logged.
func (h *Host) pull(ctx context.Context, cf model.ChangefeedID, p *pulling) {
	defer close(p.done)
	backoff := time.Second
	var failing time.Time // since when the reader has not run for long
	for ctx.Err() == nil {
		e := h.view.State().Changefeeds[cf]
		if e == nil {
			return
		}
		dir, err := h.logDir(cf)
		if err != nil {
			h.log.Warn("maintainer: cannot prepare the event log's directory", "changefeed", cf, "err", err)
			return
		}
		// Rows are numbered within their transactions only for a sink
		// that writes transaction boundaries: the summaries cost a
		// record per transaction.
		log, err := eventlog.Open(dir, 0, eventlog.Options{Transactions: e.Info.WantsTransactions(), Memory: h.cfg.LogMemory})
		if err != nil {
			h.log.Warn("maintainer: cannot open an event log", "changefeed", cf, "err", err)
			return
		}
		kept := slices.Clone(e.Status.Tables)
		for _, ti := range kept {
			if ti.State == model.TableHeld {
				log.Hold(ti.Table, ti.At)
			}
		}
		p.mu.Lock()
		p.kept, p.reading = kept, true
		from := p.resumeFrom(e)
		p.mu.Unlock()
		h.logs.Put(cf, log)
		began := time.Now()
		err = p.puller.Pull(ctx, from, log)
		p.mu.Lock()
		p.reading = false
		p.mu.Unlock()
		h.logs.Remove(cf, log)
		_ = log.Close()
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, source.ErrUnresumable) {
			// Retrying cannot help and going on from elsewhere would lose
			// changes: the changefeed fails, saying why, until the
			// operator chooses.
			h.failUnresumable(ctx, cf, p.epoch, err)
			return
		}
		if time.Since(began) > time.Minute {
			backoff, failing = time.Second, time.Time{}
		}
		if failing.IsZero() {
			failing = time.Now()
		}
		h.log.Warn("maintainer: the changefeed's reader stopped; restarting from the checkpoint", "changefeed", cf, "err", err, "retry_in", backoff)
		// Operators see why in 'changefeed get'; the next checkpoint
		// advance clears it.
		if e := h.view.State().Changefeeds[cf]; e != nil && e.Maintainer.Epoch == p.epoch {
			msg := fmt.Sprintf("source unavailable, retrying (since %s): %v", failing.UTC().Format(time.RFC3339), err)
			if werr := h.store.SetChangefeedError(ctx, e.FenceOf(h.store.Keys()), e, msg); werr != nil && ctx.Err() == nil {
				h.log.Warn("maintainer: cannot record the source's error", "changefeed", cf, "err", werr)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 30*time.Second)
	}
}

// resumeFrom is where a run of the reader starts: the entry's resume
// point, or the newer one this host stored for the same incarnation,
// placement and run when the view of etcd has not caught up with that
// write yet. A point stored for another (a resume, an update, a move
// since) is never taken over the entry's. Called under p.mu.
func (p *pulling) resumeFrom(e *meta.ChangefeedEntry) source.Position {
	if p.stored != nil && p.storedAt > e.Status.CheckpointTs && e.Info.SameIncarnation(p.info) && e.Maintainer.Epoch == p.epoch && e.Status.Run == p.run {
		return p.stored
	}
	return e.Status.SourcePosition
}

// failUnresumable fails a changefeed whose reader cannot resume (the
// upstream purged what it resumes from), with the reader's reason.
func (h *Host) failUnresumable(ctx context.Context, cf model.ChangefeedID, epoch uint64, err error) {
	h.log.Error("maintainer: the changefeed's reader cannot resume; the changefeed fails", "changefeed", cf, "err", err)
	for ctx.Err() == nil {
		e := h.view.State().Changefeeds[cf]
		if e == nil || e.Maintainer.Epoch != epoch || e.Status.State == model.ChangefeedFailed {
			return
		}
		in := model.Incident{Time: time.Now().UTC(), Kind: "failed", Node: h.self, Reason: err.Error()}
		werr := h.store.FailChangefeed(ctx, e.FenceOf(h.store.Keys()), e, err.Error(), in)
		if werr == nil {
			return
		}
		h.log.Warn("maintainer: cannot record the changefeed's failure; trying again", "changefeed", cf, "err", werr)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// logDir is an empty directory for a changefeed's event log, or "" to
// keep it in memory. A log lives as long as its reader: what an earlier
// run left is stale.
func (h *Host) logDir(cf model.ChangefeedID) (string, error) {
	if h.cfg.LogDir == "" {
		return "", nil
	}
	dir := filepath.Join(h.cfg.LogDir, url.PathEscape(string(cf)))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o700)
}

// resumePoint is the resume point to persist with a checkpoint, if the
// changefeed's reader runs here.
func (h *Host) resumePoint(cf model.ChangefeedID, checkpoint model.Ts) source.Position {
	h.mu.Lock()
	p := h.pullers[cf]
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	pos, ok := p.puller.ResumePoint(checkpoint)
	if !ok {
		return nil
	}
	return pos
}

// persisted tells the changefeed's reader that a checkpoint and its resume
// point are stored: the upstream may forget what precedes the point, and
// the log what precedes the checkpoint.
func (h *Host) persisted(cf model.ChangefeedID, checkpoint model.Ts, pos source.Position) {
	h.mu.Lock()
	p := h.pullers[cf]
	h.mu.Unlock()
	if p == nil || pos == nil {
		return
	}
	p.puller.Confirm(pos)
	p.mu.Lock()
	if checkpoint > p.storedAt {
		p.stored, p.storedAt = pos, checkpoint
	}
	p.mu.Unlock()
	if l := h.logs.Get(cf); l != nil {
		if err := l.Trim(checkpoint); err != nil {
			h.log.Warn("maintainer: cannot trim the event log", "changefeed", cf, "err", err)
		}
	}
}

// reportIssues writes what the changefeed's reader, running here for this
// placement, reports of its tables into the changefeed's status when it
// differs from what is there.
func (h *Host) reportIssues(ctx context.Context, e *meta.ChangefeedEntry, mf meta.MaintainerFence) (bool, error) {
	h.mu.Lock()
	p := h.pullers[e.Info.ID]
	h.mu.Unlock()
	if p == nil || p.epoch != e.Maintainer.Epoch || !p.info.SameIncarnation(e.Info) || p.run != e.Status.Run {
		// A run a resume ended must not write back the issues the resume
		// cleared.
		return false, nil
	}
	r, ok := p.puller.(source.IssueReporter)
	if !ok {
		return false, nil
	}
	p.mu.Lock()
	if !p.reading {
		p.mu.Unlock()
		return false, nil
	}
	issues := slices.Clone(r.TableIssues()) // its own: merged and sorted here
	for _, k := range p.kept {
		if !slices.ContainsFunc(issues, func(i model.TableIssue) bool { return i.Table == k.Table }) {
			issues = append(issues, k)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(issues, func(a, b model.TableIssue) int { return strings.Compare(a.Table, b.Table) })
	if model.SameIssues(issues, e.Status.Tables) {
		return false, nil
	}
	if err := h.store.SetTableIssues(ctx, mf, e, issues); err != nil {
		return false, err
	}
	h.log.Info("maintainer: the changefeed's tables' issues changed", "changefeed", e.Info.ID, "issues", len(issues))
	return true, nil
}
