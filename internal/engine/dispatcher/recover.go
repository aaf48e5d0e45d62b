package dispatcher

import (
	"context"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// This file is the manager's side of seed 002's dispatcher recovery. A
// dispatcher whose sink failed is not restarted here on the spot: the
// manager asks the changefeed's maintainer to recover it, and the
// maintainer re-creates it on this node under the next routing epoch
// (the remove-and-recreate that clears the request). Until a request
// has a final answer it is re-sent with every heartbeat, to whichever
// maintainer is current (R4, R7), and answers from any other are dropped
// (R8). A recovery ends when the re-created dispatcher runs healthy
// again (its checkpoint passes where the failed one stood); if that does
// not happen within the sink's recover timeout, or the maintainer answers
// FAILED, the changefeed restarts on this node (R10): its dispatchers
// stop, its sink and source are opened anew, and they start again from
// their checkpoints.

// RecoveryMetrics receives the recovery's counts; nil is fine.
type RecoveryMetrics interface {
	// Recovered counts a recovery completed at dispatcher level.
	Recovered()
	// Pending is the number of recoveries in progress on this node.
	Pending(n int)
	// Answered counts a maintainer's answer by its state.
	Answered(state transport.RecoverState)
	// Restarted counts a changefeed restart by its reason.
	Restarted(reason string)
}

// recovery is one partition's recovery on this node. Its request's
// identity is (pid, epoch, maintainerEpoch) (R9).
type recovery struct {
	cf    model.ChangefeedID
	pid   string
	epoch uint64 // the routing epoch of the dispatcher that failed last
	// maintainerEpoch is the maintainer placement the request was last
	// sent to (R7: it follows the current one).
	maintainerEpoch uint64
	state           transport.RecoverState // the last answer; "" before one
	req             transport.RecoverRequest
	since           time.Time // the first failure of this recovery
	sendAfter       time.Time // back-off: no request before
	failedAt        model.Ts  // the failed dispatcher's checkpoint
	// recreated is the epoch the dispatcher was re-created under (the
	// request is over); 0 while it waits.
	recreated uint64
	// answered is when the last answer came.
	answered time.Time
}

// flap counts a partition's recent failures, for the back-off.
type flap struct {
	n    int
	last time.Time
}

// Recovery back-off: the first request goes at once; repeated failures
// of one partition within flapWindow of each other are spaced 0.5 s,
// 1 s, 2 s … up to maxRecoverBackoff apart, counted from the start of
// the run that failed: a dispatcher that failed after retrying for its
// retry timeout has waited that long already, and one that fails at
// once waits the whole back-off. A recovery that completes releases the
// others of its changefeed on this node from their back-off: the sink
// took its writes, so whatever was failing is likely back.
const (
	flapWindow        = time.Minute
	maxRecoverBackoff = 30 * time.Second
	// permanentWait is how long a partition whose error is permanent
	// waits for its changefeed to fail before it starts again.
	permanentWait = 10 * time.Second
	// restartReport is how long a changefeed restart is reported in
	// heartbeats (the maintainer keeps each once, by its time).
	restartReport = 10 * time.Second
)

func backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return min(250*time.Millisecond<<min(n-1, 10), maxRecoverBackoff)
}

// failedRun takes a dispatcher that ended by itself with err: its
// partition waits for the maintainer to recover it. m.mu is held.
func (m *Manager) failedRun(r *managed, err error) {
	rt := r.route.Route
	k := key(rt.Changefeed, rt.ID)
	now := time.Now()
	fl := m.flaps[k]
	if fl == nil || now.Sub(fl.last) > flapWindow {
		fl = &flap{}
		m.flaps[k] = fl
	}
	fl.n++
	fl.last = now
	permanent, remedy := sink.IsPermanent(err)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	rec := m.recovering[k]
	switch {
	case rec != nil && rec.epoch >= rt.Epoch && rec.recreated == 0:
		// R2: one request per dispatcher and epoch.
		return
	case rec == nil:
		rec = &recovery{cf: rt.Changefeed, pid: rt.ID, since: now}
		m.recovering[k] = rec
	}
	rec.epoch, rec.state, rec.recreated, rec.failedAt = rt.Epoch, "", 0, r.d.Checkpoint()
	run := uint64(0)
	if e := m.view.State().Changefeeds[rt.Changefeed]; e != nil {
		run = e.Status.Run
	}
	rec.req = transport.RecoverRequest{ID: rt.ID, Epoch: rt.Epoch, Err: msg, Permanent: permanent, Remedy: remedy, Run: run}
	rec.sendAfter = r.began.Add(backoff(fl.n))
	wait := max(0, rec.sendAfter.Sub(now))
	m.log.Warn("dispatcher failed; asking its maintainer to recover it", "changefeed", rt.Changefeed, "partition", rt.ID,
		"epoch", rt.Epoch, "permanent", permanent, "failures", fl.n, "retry_in", wait.Round(time.Millisecond), "err", msg)
	m.pendingChanged()
}

// pendingChanged reports the number of recoveries. m.mu is held.
func (m *Manager) pendingChanged() {
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.Pending(len(m.recovering))
	}
}

// waitsForRecovery says a partition placed under epoch must not start:
// its dispatcher failed under that epoch and the maintainer has not
// re-created it yet. m.mu is held.
func (m *Manager) waitsForRecovery(r model.RouteEntry) bool {
	rec := m.recovering[key(r.Changefeed, r.ID)]
	return rec != nil && rec.recreated == 0 && rec.epoch >= r.Epoch
}

// started notes that a partition's dispatcher started under a routing
// epoch: a recovery waiting for that is re-created (R6). m.mu is held.
func (m *Manager) started(r model.RouteEntry) {
	if rec := m.recovering[key(r.Changefeed, r.ID)]; rec != nil && rec.recreated == 0 && r.Epoch > rec.epoch {
		rec.recreated = r.Epoch
		m.log.Info("dispatcher re-created for its recovery", "changefeed", r.Changefeed, "partition", r.ID, "failed_epoch", rec.epoch, "epoch", r.Epoch)
	}
}

// checkRecoveries ends recoveries whose dispatcher runs healthy again, or
// whose partition left this node; it returns the changefeeds whose
// recovery timed out, to restart. m.mu is held.
func (m *Manager) checkRecoveries(st *meta.State, timeout func(model.ChangefeedID) time.Duration) map[model.ChangefeedID]transport.Restart {
	restart := map[model.ChangefeedID]transport.Restart{}
	recovered := map[model.ChangefeedID]bool{}
	for k, rec := range m.recovering {
		e, exists := st.Changefeeds[rec.cf]
		r, placed := st.Partitions[rec.cf][rec.pid]
		switch {
		case !exists:
			delete(m.recovering, k) // removed with its changefeed
			continue
		case rec.recreated != 0:
			run := m.running[k]
			if run != nil && run.route.Route.Epoch == rec.recreated && run.d.Checkpoint() > rec.failedAt {
				delete(m.recovering, k)
				m.log.Info("dispatcher recovered", "changefeed", rec.cf, "partition", rec.pid, "epoch", rec.recreated, "took", time.Since(rec.since).Round(time.Millisecond))
				if m.cfg.Metrics != nil {
					m.cfg.Metrics.Recovered()
				}
				recovered[rec.cf] = true
				continue
			}
			if !placed || r.Route.Node != m.self || r.Route.Epoch > rec.recreated || r.Route.Status == model.PartitionDraining {
				// Moved, split or placed again since, or being moved
				// away: its new owner starts afresh.
				delete(m.recovering, k)
				continue
			}
		}
		if e.Status.State != model.ChangefeedNormal {
			// Paused or failed: nothing runs, and a resume starts every
			// dispatcher afresh. A request from before must not fail
			// the resumed changefeed.
			delete(m.recovering, k)
			continue
		}
		if rec.state == transport.RecoverFailed && time.Since(rec.answered) > permanentWait {
			// The changefeed should have failed by now; it has not (or it
			// failed and was resumed before this node saw it): start the
			// dispatcher again, and a lasting error reports itself again.
			delete(m.recovering, k)
			continue
		}
		if time.Since(rec.since) > timeout(rec.cf) {
			restart[rec.cf] = transport.Restart{Reason: "recover_timeout", Err: rec.req.Err, Time: time.Now().UnixMilli()}
		}
	}
	// Once a changefeed, not once a partition recovered: each release
	// walks every recovery of the node, and a sink back after an outage
	// recovers all of a node's 33,000 partitions in one check.
	for cf := range recovered {
		m.releaseBackoffs(cf)
	}
	for cf := range restart {
		m.forgetRecoveries(cf)
	}
	// A partition that has not failed for a flap window starts its
	// back-off afresh anyway; forgetting it keeps the map to the
	// partitions failing now, not every one that ever failed here.
	for k, fl := range m.flaps {
		if time.Since(fl.last) > flapWindow {
			delete(m.flaps, k)
		}
	}
	m.pendingChanged()
	return restart
}

// releaseBackoffs lets a changefeed's recoveries waiting out a back-off
// ask now: one of them has just recovered, so the sink takes writes
// again. A partition still failing fails again, and its back-off (its
// failure count is kept) spaces the next attempt. m.mu is held.
func (m *Manager) releaseBackoffs(cf model.ChangefeedID) {
	now := time.Now()
	for _, rec := range m.recovering {
		if rec.cf == cf && rec.recreated == 0 && rec.sendAfter.After(now) {
			rec.sendAfter = now
			m.log.Info("recovery released from its back-off: another partition of the changefeed recovered", "changefeed", cf, "partition", rec.pid, "epoch", rec.epoch)
		}
	}
}

// forgetRecoveries drops a changefeed's recoveries (it restarts). m.mu
// is held.
func (m *Manager) forgetRecoveries(cf model.ChangefeedID) {
	for k, rec := range m.recovering {
		if rec.cf == cf {
			delete(m.recovering, k)
		}
	}
}

// recoverTimeout is the recover timeout of a changefeed's sink.
func recoverTimeout(st *meta.State) func(model.ChangefeedID) time.Duration {
	return func(cf model.ChangefeedID) time.Duration {
		if e := st.Changefeeds[cf]; e != nil {
			return registry.RecoverTimeout(e.Info.SinkURI)
		}
		return sink.DefaultRecoverTimeout
	}
}

// requests are the recovery requests to send now, per changefeed, each
// addressed to the changefeed's current maintainer placement. m.mu is
// held.
func (m *Manager) requests(st *meta.State) map[model.ChangefeedID][]transport.RecoverRequest {
	out := map[model.ChangefeedID][]transport.RecoverRequest{}
	now := time.Now()
	for _, rec := range m.recovering {
		e := st.Changefeeds[rec.cf]
		if rec.recreated != 0 || now.Before(rec.sendAfter) || rec.state.Final() || e == nil {
			continue
		}
		if rec.maintainerEpoch != e.Maintainer.Epoch {
			if rec.maintainerEpoch != 0 {
				m.log.Info("recovery request follows the new maintainer", "changefeed", rec.cf, "partition", rec.pid, "epoch", rec.epoch,
					"maintainer_epoch", e.Maintainer.Epoch, "was", rec.maintainerEpoch)
			}
			rec.maintainerEpoch, rec.state = e.Maintainer.Epoch, ""
		}
		out[rec.cf] = append(out[rec.cf], rec.req)
	}
	return out
}

// onRecoverAnswer takes a maintainer's answers. Only the changefeed's
// current maintainer placement is heard (R8), and only about the request
// it was sent (its identity).
func (m *Manager) onRecoverAnswer(_ context.Context, msg transport.Message) {
	var ans transport.RecoverAnswer
	if err := msg.Decode(&ans); err != nil {
		m.log.Warn("dropped a recovery answer that does not decode", "from", msg.From, "err", err)
		return
	}
	e := m.view.State().Changefeeds[ans.Changefeed]
	if e == nil || e.Maintainer.Node != msg.From || e.Maintainer.Epoch != ans.MaintainerEpoch {
		m.log.Debug("dropped a recovery answer from a maintainer that is not the current one", "changefeed", ans.Changefeed, "from", msg.From, "maintainer_epoch", ans.MaintainerEpoch)
		return
	}
	wake := false
	m.mu.Lock()
	for _, a := range ans.Answers {
		k := key(ans.Changefeed, a.ID)
		rec := m.recovering[k]
		if rec == nil || rec.epoch != a.Epoch || rec.maintainerEpoch != ans.MaintainerEpoch || rec.recreated != 0 || rec.state.Final() {
			continue // not the request in flight
		}
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.Answered(a.State)
		}
		if rec.state != a.State {
			m.log.Info("recovery answered", "changefeed", ans.Changefeed, "partition", a.ID, "epoch", a.Epoch, "maintainer_epoch", ans.MaintainerEpoch, "state", a.State, "reason", a.Reason)
		}
		rec.state, rec.answered = a.State, time.Now()
		switch a.State {
		case transport.RecoverSuperseded:
			delete(m.recovering, k)
		case transport.RecoverFailed:
			// A permanent error: the maintainer fails the changefeed, and
			// the partition waits here for that (kept, not re-sent).
			if !rec.req.Permanent {
				delete(m.recovering, k)
				// The maintainer cannot recover it: the changefeed
				// restarts here instead (a permanent error fails it).
				m.restartFeeds[ans.Changefeed] = transport.Restart{Reason: "recover_failed", Err: rec.req.Err + ": " + a.Reason, Time: time.Now().UnixMilli()}
				wake = true
			}
		}
	}
	m.pendingChanged()
	m.mu.Unlock()
	if wake {
		m.poke()
	}
}

// poke ends the manager's rest: there is work for the next pass.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// restartFeed restarts a changefeed on this node (R10): its dispatchers
// stop (where they can, exactly; a sink that does not answer aborts
// them), its sink and source close, and the next pass opens them anew
// and starts every dispatcher from its position.
func (m *Manager) restartFeed(cf model.ChangefeedID, why transport.Restart) {
	m.mu.Lock()
	var runs []*managed
	m.indexRunningLocked()
	for k, r := range m.byFeed[cf] {
		runs = append(runs, r)
		m.unsetRunningLocked(k)
	}
	f := m.feeds[cf]
	delete(m.feeds, cf)
	m.forgetRecoveries(cf)
	m.restarts[cf] = append(m.restarts[cf], why)
	m.pendingChanged()
	m.mu.Unlock()
	m.log.Warn("restarting the changefeed on this node", "changefeed", cf, "reason", why.Reason, "dispatchers", len(runs), "err", why.Err)
	m.stopAndReportWithin(runs, restartStopTimeout)
	if f != nil {
		f.close()
	}
	// Its dispatchers ended outside a pass's own stops: the next pass is
	// not skipped, and looks at every dispatcher (reconcile.go).
	m.ended.Store(true)
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.Restarted(why.Reason)
	}
}

// restartStopTimeout bounds a restart's graceful stops: the sink is
// likely what failed.
const restartStopTimeout = 5 * time.Second

// restartsToReport are the changefeed restarts still reported in
// heartbeats; older ones are forgotten. m.mu is held.
func (m *Manager) restartsToReport() map[model.ChangefeedID][]transport.Restart {
	out := map[model.ChangefeedID][]transport.Restart{}
	cut := time.Now().Add(-restartReport).UnixMilli()
	for cf, rs := range m.restarts {
		kept := rs[:0]
		for _, r := range rs {
			if r.Time >= cut {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			delete(m.restarts, cf)
			continue
		}
		m.restarts[cf] = kept
		out[cf] = append([]transport.Restart(nil), kept...)
	}
	return out
}
