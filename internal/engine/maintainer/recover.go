package maintainer

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// This file is the maintainer's side of seed 002's dispatcher recovery.
// A node asks, in its heartbeats, for the recovery of each dispatcher of
// the changefeed that failed there; every request gets an answer (R5),
// computed from the routing table as it stands, so a maintainer that has
// just been placed answers exactly as its predecessor would have (R7):
//
//   - ACCEPTED: the partition still runs under the failed epoch on the
//     asking node; the next pass re-creates it there under the next epoch
//     (the routing table's remove-and-recreate, R6), from its position;
//   - RUNNING: it has been re-created for this request (its history says
//     so);
//   - SUPERSEDED: it was placed anew otherwise (moved, split, returned),
//     is being moved, or the changefeed is not running;
//   - FAILED: the error is permanent; the changefeed fails with it and
//     waits for an operator.

// acceptedRecovery is a request the next pass carries out.
type acceptedRecovery struct {
	req  transport.RecoverRequest
	from model.NodeID
}

// onRecover answers a heartbeat's recovery requests and keeps what the
// next pass must do. h.mu is held; rep is the changefeed's record.
func (h *Host) onRecover(st *meta.State, e *meta.ChangefeedEntry, rep *heard, from model.NodeID, hb *transport.Heartbeat) []transport.RecoverReply {
	var replies []transport.RecoverReply
	now := time.Now()
	for _, req := range hb.Recover {
		state, reason := answer(st, e, from, req)
		if state == "" {
			// An epoch the routing table does not have: this maintainer's
			// view lags, and the node asks again with its next heartbeat.
			// One that never appears was never placed (a request from
			// before the changefeed was re-created, or forged): R5 wants
			// an answer for every identity, so it is superseded.
			id := fmt.Sprintf("%s/%s@%d", from, req.ID, req.Epoch)
			first, seen := rep.unseen[id]
			if !seen {
				rep.unseen[id] = now
				continue
			}
			if now.Sub(first) < unseenEpochWait {
				continue
			}
			delete(rep.unseen, id)
			state, reason = transport.RecoverSuperseded, fmt.Sprintf("epoch %d of %s was never placed", req.Epoch, req.ID)
			h.log.Warn("maintainer: a recovery request names an epoch that was never placed", "changefeed", e.Info.ID, "partition", req.ID, "epoch", req.Epoch, "node", from)
		}
		switch state {
		case transport.RecoverAccepted:
			if _, seen := rep.recover[req.ID]; !seen {
				h.log.Info("maintainer: recovering a dispatcher", "changefeed", e.Info.ID, "partition", req.ID, "epoch", req.Epoch, "maintainer_epoch", rep.epoch, "node", from, "err", req.Err)
			}
			rep.recover[req.ID] = acceptedRecovery{req: req, from: from}
		case transport.RecoverFailed:
			if rep.failure == "" {
				rep.failureRun = req.Run
				rep.failure = fmt.Sprintf("partition %s on %s: %s; %s", req.ID, from, req.Err, req.Remedy)
				rep.incidents = append(rep.incidents, model.Incident{Time: time.Now().UTC(), Kind: "failed", Partition: req.ID, Node: from, Err: req.Err, Reason: req.Remedy})
				h.log.Warn("maintainer: a dispatcher failed for good; the changefeed fails", "changefeed", e.Info.ID, "partition", req.ID, "epoch", req.Epoch, "node", from, "err", req.Err)
			}
		}
		replies = append(replies, transport.RecoverReply{ID: req.ID, Epoch: req.Epoch, State: state, Reason: reason})
	}
	for k, first := range rep.unseen {
		if now.Sub(first) > 10*unseenEpochWait {
			delete(rep.unseen, k) // no longer asked about
		}
	}
	for k, heard := range rep.restarts {
		// A node reports a restart for a few seconds (the dispatcher
		// manager's restartReport); after that it cannot come again.
		if now.Sub(heard) > time.Minute {
			delete(rep.restarts, k)
		}
	}
	for _, r := range hb.Restarts {
		k := fmt.Sprintf("%s@%d", from, r.Time)
		if _, seen := rep.restarts[k]; seen {
			continue
		}
		rep.restarts[k] = now
		rep.incidents = append(rep.incidents, model.Incident{Time: time.UnixMilli(r.Time).UTC(), Kind: "restart", Node: from, Reason: r.Reason, Err: r.Err})
	}
	return replies
}

// unseenEpochWait is how long a request about an epoch the routing table
// does not have waits for the maintainer's view to catch up before it is
// answered SUPERSEDED: far longer than a view lags.
const unseenEpochWait = 10 * time.Second

// answer is the state of a request as the routing table stands; "" for
// a request about an epoch this maintainer has not seen yet (its view
// lags: the node asks again).
func answer(st *meta.State, e *meta.ChangefeedEntry, from model.NodeID, req transport.RecoverRequest) (transport.RecoverState, string) {
	r, ok := st.Partitions[e.Info.ID][req.ID]
	switch {
	case !ok:
		return transport.RecoverSuperseded, "the partition no longer exists (split or removed)"
	case r.Route.Epoch < req.Epoch:
		return "", ""
	case r.Route.Epoch > req.Epoch:
		for _, ev := range r.Route.History {
			if ev.Kind == "recovered" && ev.Epoch == req.Epoch && r.Route.Node == from {
				return transport.RecoverRunning, fmt.Sprintf("re-created under epoch %d", r.Route.Epoch)
			}
		}
		return transport.RecoverSuperseded, fmt.Sprintf("placed again since: epoch %d on %s", r.Route.Epoch, r.Route.Node)
	case e.Status.State != model.ChangefeedNormal:
		// Failed already (by another partition's error) or paused: its
		// dispatchers stop; a resume starts them afresh.
		return transport.RecoverSuperseded, fmt.Sprintf("the changefeed is %s", e.Status.State)
	case req.Permanent && req.Run != e.Status.Run:
		return transport.RecoverSuperseded, "the error is from before the changefeed was resumed"
	case req.Permanent:
		return transport.RecoverFailed, "a permanent error: the changefeed fails until an operator resumes it"
	case r.Route.Node != from:
		return transport.RecoverSuperseded, fmt.Sprintf("the partition runs on %s", r.Route.Node)
	case r.Route.Status == model.PartitionDraining:
		return transport.RecoverSuperseded, "the partition is being moved or split, which re-creates it"
	}
	return transport.RecoverAccepted, ""
}

// sendAnswers sends a node its answers; a lost answer is replaced by
// the answer to the next request.
func (h *Host) sendAnswers(to model.NodeID, cf model.ChangefeedID, epoch uint64, replies []transport.RecoverReply) {
	msg, err := transport.NewMessage(h.self, to, transport.TopicRecoverAnswer, transport.RecoverAnswer{Changefeed: cf, MaintainerEpoch: epoch, Answers: replies})
	if err != nil {
		h.log.Error("maintainer: cannot encode a recovery answer", "err", err)
		return
	}
	// Sent beside the heartbeat's handler (which must not wait on the
	// network), but owned by the host: Run waits for it.
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.answering.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.answering.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := h.tr.Send(ctx, msg); err != nil {
			h.log.Debug("maintainer: recovery answer not delivered; the next request gets one", "to", to, "err", err)
		}
	}()
}

// recover carries out the accepted recoveries, fails the changefeed on a
// permanent error, and records incidents in its status. It returns true
// when it wrote: the rest of the pass would work from a stale read.
func (h *Host) recover(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence) (bool, error) {
	h.mu.Lock()
	rep := h.heard[e.Info.ID]
	if rep == nil || rep.epoch != e.Maintainer.Epoch {
		h.mu.Unlock()
		return false, nil
	}
	wrote := false
	accepted := make([]acceptedRecovery, 0, len(rep.recover))
	for _, a := range rep.recover {
		accepted = append(accepted, a)
	}
	failure := rep.failure
	if failure != "" && rep.failureRun != e.Status.Run {
		// Heard in a run that is over (the changefeed was resumed since).
		rep.failure, failure = "", ""
	}
	h.mu.Unlock()

	for _, a := range accepted {
		r, ok := st.Partitions[e.Info.ID][a.req.ID]
		if ok && e.Status.State == model.ChangefeedNormal && failure == "" && r.Route.Epoch == a.req.Epoch && r.Route.Node == a.from && r.Route.Status == model.PartitionActive {
			why := fmt.Sprintf("its dispatcher (epoch %d) failed: %s", a.req.Epoch, a.req.Err)
			if err := h.store.RecoverPartition(ctx, mf, r, why, time.Now().UTC()); err != nil {
				return wrote, err
			}
			wrote = true
			h.log.Info("maintainer: dispatcher re-created", "changefeed", e.Info.ID, "partition", a.req.ID, "failed_epoch", a.req.Epoch, "epoch", a.req.Epoch+1, "node", a.from)
			h.mu.Lock()
			rep.incidents = append(rep.incidents, model.Incident{Time: time.Now().UTC(), Kind: "recovered", Partition: a.req.ID, Node: a.from, Err: a.req.Err})
			h.mu.Unlock()
		}
		// Done either way: a request about a partition that changed
		// since gets its answer from the routing table.
		h.mu.Lock()
		if cur, ok := rep.recover[a.req.ID]; ok && cur.req.Epoch == a.req.Epoch {
			delete(rep.recover, a.req.ID)
		}
		h.mu.Unlock()
	}

	h.mu.Lock()
	incidents := append([]model.Incident(nil), rep.incidents...)
	for _, in := range incidents {
		if in.Err != "" && (in.Kind == "recovered" || in.Kind == "restart") {
			rep.stall.heard(in)
		}
	}
	stalled := rep.stall.reason(time.Now())
	h.mu.Unlock()
	if e.Status.State != model.ChangefeedNormal || e.Status.Error == stalled {
		stalled = ""
	}
	var err error
	switch {
	case failure != "" && e.Status.State == model.ChangefeedNormal:
		err = h.store.FailChangefeed(ctx, mf, e, failure, incidents...)
	case len(incidents) > 0:
		err = h.store.RecordIncidents(ctx, mf, e, incidents, stalled)
	case stalled != "":
		err = h.store.SetChangefeedError(ctx, mf, e, stalled)
	}
	if err != nil {
		return wrote, err // the next pass tries again
	}
	wrote = wrote || failure != "" || len(incidents) > 0 || stalled != ""
	h.mu.Lock()
	defer h.mu.Unlock()
	rep.incidents = rep.incidents[len(incidents):] // more may have come meanwhile
	if rep.failure == failure {
		rep.failure = "" // written, or the changefeed no longer runs
	}
	return wrote, nil
}

// stall is what a maintainer knows of a changefeed that may not advance
// because its dispatchers keep failing (a full disk, a bucket or broker
// that refuses writes): each failure is recovered, from its checkpoint,
// and fails again, while the changefeed's state said normal and nothing
// said why (issue 33). It becomes the changefeed's error once the
// checkpoint has not advanced for StallAfter since the failures began;
// the next advance clears both.
type stall struct {
	// advanced: when the checkpoint last advanced (or the maintainer was
	// placed).
	advanced time.Time
	// since: the first failure heard after that advance; last: the
	// newest, which the error names.
	since time.Time
	last  model.Incident
}

// StallAfter is how long a changefeed whose dispatchers fail may go
// without a checkpoint advance before its error says so: longer than a
// storage sink's flush interval, the longest a healthy checkpoint waits.
const StallAfter = 10 * time.Second

func (s *stall) heard(in model.Incident) {
	if s.since.IsZero() {
		s.since = in.Time
	}
	s.last = in
}

// advance is a checkpoint advance: whatever failed is over.
func (s *stall) advance(now time.Time) { *s = stall{advanced: now} }

// reason is the changefeed's error while it stalls, else "".
func (s *stall) reason(now time.Time) string {
	if s.since.IsZero() || now.Sub(s.advanced) < StallAfter {
		return ""
	}
	what := fmt.Sprintf("partition %s on %s", s.last.Partition, s.last.Node)
	if s.last.Kind == "restart" {
		what = fmt.Sprintf("the changefeed restarted on %s (%s)", s.last.Node, s.last.Reason)
	}
	return fmt.Sprintf("not advancing: its dispatchers keep failing and are recovered from their checkpoints (since %s); last, %s: %s",
		s.since.UTC().Format(time.RFC3339), what, s.last.Err)
}
