package dispatcher

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A reconcile pass starts and stops this node's dispatchers to match its
// share of the routing table. Most passes look only at the changefeeds
// whose share changed since the pass before: during a drain some
// changefeed's routing table changes on nearly every state change, and
// checking each of a node's 6,700 dispatchers (20,000 partitions on three
// captures) against its share every time was a tenth of the cluster's
// CPU. A pass looks at every dispatcher and every partition of the share
// when the share was built anew (this node registered again), and while
// anything else may have changed what runs: a dispatcher ended by itself,
// starts are left for the next pass, a start failed, a recovery or a
// restart waits (and once more after, for what changed as they ended).
// So anything that takes dispatchers out of running outside a pass must
// set m.ended, as a run ending by itself and restartFeed do: a scoped
// pass would not look at them, and a settled one not at all.

// reconcile starts and stops dispatchers to match the routing table; it
// returns true when it has new final positions to send.
func (m *Manager) reconcile(ctx context.Context, st *meta.State) bool {
	want, drainingHere := m.share.of(st, m.self)
	m.mu.Lock()
	if m.settledLocked(m.reconciled) {
		m.mu.Unlock()
		return false
	}
	dirty, whole := m.share.take()
	full := m.wholePassLocked(whole)
	m.reconciled, m.more = m.share.built, false
	// Cleared before the running dispatchers are looked at: one that
	// ends from here on marks it again, for the next reconcile.
	m.ended.Store(false)
	var stale []*managed
	m.eachRunningLocked(full, dirty, func(k string, r *managed) {
		w, ok := want[k]
		select {
		case <-r.done:
			// Ended by itself (its sink failed): it is recovered from its
			// checkpoint, by its maintainer (recover.go).
			m.putFinalLocked(finalKey(r.route.Route), &final{cf: r.route.Route.Changefeed, pid: r.route.Route.ID,
				p: progressOf(r.d, m.self, r.route.Route.Epoch)})
			m.unsetRunningLocked(k)
			m.failedRun(r, r.err)
			return
		default:
		}
		if d, draining := drainingHere[k]; !ok && draining && d.Route.Epoch == r.route.Route.Epoch {
			// Being moved away (seed 003, MigrateOut): stop and report the
			// final position under the routing entry as it is now.
			r.route = d
			stale = append(stale, r)
			m.unsetRunningLocked(k)
		} else if !ok || w.Route.Epoch != r.route.Route.Epoch {
			stale = append(stale, r)
			m.unsetRunningLocked(k)
		} else if w.Revision != r.route.Revision {
			// Rewritten without a new placement: progress reports must be
			// fenced by the current revision.
			r.route = w
		}
	})
	restart := m.checkRecoveries(st, recoverTimeout(st))
	for cf, why := range m.restartFeeds {
		restart[cf] = why
		delete(m.restartFeeds, cf)
	}
	m.mu.Unlock()
	// Stop what no longer belongs here, all at once, and keep where each
	// stopped: a paused changefeed resumes exactly there, and a partition
	// being moved away is handed over there.
	stopping := time.Now()
	endBeats := m.beatWhileWaiting(ctx, len(stale)+len(restart))
	m.stopAndReport(stale)
	if len(stale) > 0 {
		m.waited = time.Since(stopping)
		m.log.Debug("dispatchers stopped", "count", len(stale), "took", m.waited.Round(time.Millisecond))
	}
	for cf, why := range restart {
		m.restartFeed(cf, why) // its stops wait for a failed sink too
	}
	endBeats()
	newFinals := len(stale) > 0
	// A partition being moved away that nothing runs here (this process
	// started after it was placed, or its changefeed is paused) is handed
	// over where it stopped, or at its last persisted position.
	for k, d := range drainingHere {
		fk := finalKey(d.Route)
		m.mu.Lock()
		_, runs := m.running[k]
		f, known := m.finals[fk]
		var knownAt model.Ts
		handedOver := false
		if known {
			knownAt, handedOver = f.p.Checkpoint, f.p.Handover
		}
		m.mu.Unlock()
		switch {
		case runs:
		case known:
			// The state is saved outside the lock: heartbeats go on.
			if !handedOver && m.saveState(d.Route, knownAt) {
				m.mu.Lock()
				f.p.Final, f.p.Handover, newFinals = true, true, true
				m.mu.Unlock()
			}
		default:
			p, ok := st.Progress[d.Route.Changefeed][d.Route.ID]
			if ok && p.Progress.Epoch == d.Route.Epoch && p.Progress.Final && p.Progress.Handover {
				break // already handed over
			}
			from, copied := m.resumeFrom(st, d.Route)
			from, copied = m.sinkHolds(ctx, st, d.Route, from, copied)
			if !m.saveState(d.Route, from) {
				break // tried again on the next pass
			}
			m.mu.Lock()
			m.putFinalLocked(fk, &final{cf: d.Route.Changefeed, pid: d.Route.ID,
				p: model.Progress{Checkpoint: from, Node: m.self, Epoch: d.Route.Epoch, Final: true, Handover: true, Copy: copied}})
			m.mu.Unlock()
			newFinals = true
		}
	}
	m.mu.Lock()
	for k, f := range m.failed {
		if w, ok := want[k]; !ok || w.Route.Epoch != f.Epoch {
			delete(m.failed, k)
		}
	}
	var toStart []meta.RouteRecord
	m.eachWanted(full, dirty, want, func(k string, r meta.RouteRecord) {
		if _, runs := m.running[k]; !runs && !m.waitsForRecovery(r.Route) {
			toStart = append(toStart, r)
		}
	})
	if len(toStart) > maxStartsPerPass {
		// The oldest placements first, those whose start failed before
		// last (they would otherwise take every pass's places, and the
		// others never start); the rest at once after (more).
		failed := func(r meta.RouteRecord) bool { return m.failed[key(r.Route.Changefeed, r.Route.ID)] != nil }
		slices.SortFunc(toStart, func(a, b meta.RouteRecord) int {
			if fa, fb := failed(a), failed(b); fa != fb {
				if fa {
					return 1
				}
				return -1
			}
			return cmp.Compare(a.Revision, b.Revision)
		})
		toStart, m.more = toStart[:maxStartsPerPass], true
	}
	m.mu.Unlock()
	starting := time.Now()
	// Starts open their changefeeds' sinks and sources, which may hang
	// as long as they cannot be reached: the node's beats go on.
	endBeats = m.beatWhileWaiting(ctx, len(toStart))
	defer endBeats()
	prepared := m.prepareAll(ctx, toStart)
	preparing := time.Since(starting)
	resumes := m.resumeAll(ctx, st, toStart, prepared)
	resuming := time.Since(starting) - preparing
	started := 0
	for i, r := range toStart {
		k := key(r.Route.Changefeed, r.Route.ID)
		err := m.start(ctx, st, r, prepared[i], resumes[i])
		m.mu.Lock()
		if err == nil {
			started++
			delete(m.failed, k)
		} else {
			// Reported in heartbeats, so that the maintainer can give the
			// partition back after a few attempts.
			f := m.failed[k]
			if f == nil {
				f = &failedStart{cf: r.Route.Changefeed, FailedStart: transport.FailedStart{ID: r.Route.ID, Epoch: r.Route.Epoch}}
				m.failed[k] = f
			}
			f.Attempts++
			f.Err = err.Error()
			m.log.Warn("cannot start dispatcher; will retry", "partition", r.Route.ID, "changefeed", r.Route.Changefeed, "attempts", f.Attempts, "err", err)
		}
		m.mu.Unlock()
	}
	if started == 0 {
		// Not one started: the rest would fail alike (failed ones come
		// last). They wait for the next change or heartbeat, as before,
		// instead of a reconcile after another with no rest.
		m.mu.Lock()
		m.more = false
		m.mu.Unlock()
	}
	if len(toStart) > 0 {
		took := time.Since(starting)
		m.waited += took
		m.log.Debug("dispatchers started", "count", len(toStart), "took", took.Round(time.Millisecond),
			"preparing", preparing.Round(time.Millisecond), "resuming", resuming.Round(time.Millisecond))
	}
	m.closeUnusedFeeds(st)
	return newFinals
}

// closeUnusedFeeds closes the sinks and sources of changefeeds with nothing running here.
func (m *Manager) closeUnusedFeeds(st *meta.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexRunningLocked()
	for id, f := range m.feeds {
		e, exists := st.Changefeeds[id]
		if len(m.byFeed[id]) == 0 && (!exists || !e.Info.SameIncarnation(f.info)) {
			f.close()
			delete(m.feeds, id)
		}
	}
}

// wholePassLocked says whether this pass looks at every dispatcher and
// every partition of the share (whole: the share was built anew), and
// remembers whether this one had reason to, for the next. m.mu is held.
func (m *Manager) wholePassLocked(whole bool) bool {
	unsettled := m.ended.Load() || m.more || len(m.failed) > 0 || len(m.recovering) > 0 || len(m.restartFeeds) > 0
	full := whole || unsettled || m.unsettledBefore
	m.unsettledBefore = unsettled
	return full
}

// eachRunningLocked calls f for every dispatcher running here (full), or
// for those of the changefeeds in dirty; f may take the one it is given
// out (unsetRunningLocked). m.mu is held.
func (m *Manager) eachRunningLocked(full bool, dirty map[model.ChangefeedID]bool, f func(string, *managed)) {
	if full {
		for k, r := range m.running {
			f(k, r)
		}
		return
	}
	m.indexRunningLocked()
	for cf := range dirty {
		for k, r := range m.byFeed[cf] {
			f(k, r)
		}
	}
}

// eachWanted calls f for every partition this node should run (full), or
// for those of the changefeeds in dirty.
func (m *Manager) eachWanted(full bool, dirty map[model.ChangefeedID]bool, want map[string]meta.RouteRecord, f func(string, meta.RouteRecord)) {
	if full {
		for k, r := range want {
			f(k, r)
		}
		return
	}
	for cf := range dirty {
		for _, k := range m.share.keys[cf] {
			if r, ok := want[k]; ok {
				f(k, r)
			}
		}
	}
}

// setRunningLocked and unsetRunningLocked put a dispatcher into the
// running ones and take it out, keeping the index by changefeed (byFeed)
// with them. m.mu is held.
func (m *Manager) setRunningLocked(k string, r *managed) {
	m.indexRunningLocked()
	if old, ok := m.running[k]; ok {
		m.dropIndexLocked(k, old)
	}
	m.running[k] = r
	cf := r.route.Route.Changefeed
	if m.byFeed[cf] == nil {
		m.byFeed[cf] = map[string]*managed{}
	}
	m.byFeed[cf][k] = r
	m.indexed++
}

func (m *Manager) unsetRunningLocked(k string) {
	r, ok := m.running[k]
	if !ok {
		return
	}
	m.indexRunningLocked()
	delete(m.running, k)
	m.dropIndexLocked(k, r)
}

func (m *Manager) dropIndexLocked(k string, r *managed) {
	cf := r.route.Route.Changefeed
	if _, ok := m.byFeed[cf][k]; !ok {
		return
	}
	delete(m.byFeed[cf], k)
	if len(m.byFeed[cf]) == 0 {
		delete(m.byFeed, cf)
	}
	m.indexed--
}

// indexRunningLocked builds the index by changefeed again when it does
// not hold what runs (a test set m.running itself, or stopAll emptied
// it). A dispatcher's changefeed never changes while it runs, so equal
// counts mean the same entries. m.mu is held.
func (m *Manager) indexRunningLocked() {
	if m.byFeed != nil && m.indexed == len(m.running) {
		return
	}
	m.byFeed, m.indexed = map[model.ChangefeedID]map[string]*managed{}, 0
	for k, r := range m.running {
		cf := r.route.Route.Changefeed
		if m.byFeed[cf] == nil {
			m.byFeed[cf] = map[string]*managed{}
		}
		m.byFeed[cf][k] = r
		m.indexed++
	}
}

// beatWhileWaiting keeps the node's heartbeats going while stops and
// starts wait: a graceful stop waits for its sink's flush, up to 30 s on
// a sink that has stalled, a start for its sink and source to open, and
// the loop that beats is the one waiting. Without them
// every changefeed on the node, not only the stalled one, lagged that
// long. Each beat reads the cluster as it is then (a drain moves
// maintainers while the target's dispatchers stop). The returned func
// ends them, a beat under way cut short (the loop's next one follows at
// once); only one beat runs at a time, as the loop's own are not sent
// meanwhile.
func (m *Manager) beatWhileWaiting(ctx context.Context, waits int) func() {
	if waits == 0 {
		return func() {}
	}
	bctx, cancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			every := m.beatEvery()
			m.mu.Lock()
			wait := max(0, every-time.Since(m.lastBeat))
			m.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-bctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			m.heartbeat(bctx, m.view.State())
		}
	}()
	return func() {
		cancel()
		<-ended
	}
}
