package coordinator

// A change of a changefeed's tables that the coordinator makes by itself
// (table rules followed, a held table's remedy) is made in one pause,
// and written with it (model.Refollow): each update advances the record
// in its own write, the resume clears it. A coordinator that stops in
// the middle leaves the changefeed paused with its record, and the next
// one's first round makes the rest and resumes it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// refollowGiveUp is how long a changefeed stays paused while the rest of
// a change of its tables fails after a step of it was made (a table
// removed to be copied again, not yet added back), before it is resumed
// without the rest.
const refollowGiveUp = 10 * time.Minute

// errMovedOn refuses a change of a changefeed's tables computed from a
// state it no longer has: the next round computes it again.
var errMovedOn = errors.New("the changefeed changed since this round read it")

// refollow changes a running changefeed's tables to each of steps in
// turn in one pause, by names why. The change is written with the pause
// (model.Refollow) and advanced with each update: a coordinator that
// stops in the middle leaves it to the next (finishLeft).
func (c *Coordinator) refollow(ctx context.Context, term election.Term, read *meta.ChangefeedEntry, by string, again []string, steps ...[]string) error {
	id := read.Info.ID
	r := model.Refollow{By: by, Steps: steps, Again: again, Since: time.Now().UTC()}
	err := c.writeStatus(ctx, id, func(e *meta.ChangefeedEntry) error {
		// Computed from this round's view, which may be tens of seconds
		// old by now: an operator may have paused it, updated its tables
		// (a table added would be removed again) or resumed it (which
		// reads held tables again).
		switch {
		case e.Status.State != model.ChangefeedNormal:
			return fmt.Errorf("%w: it is %s now; left as it is", errMovedOn, e.Status.State)
		case e.InfoRevision != read.InfoRevision || e.Status.Run != read.Status.Run:
			return fmt.Errorf("%w: updated or resumed since; looked at again at the next round", errMovedOn)
		}
		r.Run = &e.Status.Run
		return c.store.PauseToRefollow(ctx, term.Fence, e, r)
	})
	if err != nil {
		return err
	}
	return c.finishRefollow(ctx, term, id, r, false)
}

// finishRefollow waits for a changefeed paused for r to stop, makes the
// steps of r not yet made and resumes it. An update that fails leaves
// the rest undone, and the changefeed is resumed as it is (the resume's
// incident says so): a changefeed is not left paused. When ctx ends
// (this coordinator no longer leads, or stops) it is left paused with
// its record, for the next coordinator. left says an earlier
// coordinator paused it.
func (c *Coordinator) finishRefollow(ctx context.Context, term election.Term, id model.ChangefeedID, r model.Refollow, left bool) (err error) {
	defer func() {
		if ctx.Err() != nil {
			c.log.Info("coordinator: stopped while changing a changefeed's tables; the next coordinator makes the rest and resumes it", "changefeed", id, "by", r.By)
			return
		}
		if errors.Is(err, errMovedOn) {
			c.log.Info("coordinator: the changefeed's change of tables for "+r.By+" was taken over; the rest of it is not made", "changefeed", id, "why", err)
			return
		}
		by := r.By
		if err != nil && r.Done > 0 {
			// A table removed to be copied again and not added back:
			// resumed now, the changefeed would go on without it. Paused,
			// with its record, the next rounds try the rest again, for a
			// while.
			out := leaving(r.Steps[len(r.Steps)-1], r.Steps[r.Done-1])
			if until := r.Since.Add(refollowGiveUp); time.Now().Before(until) {
				c.log.Warn("coordinator: a step of a change of the changefeed's tables failed after an earlier one was made; it stays paused, and the rest is tried again at each round until "+until.Format(time.RFC3339)+", then it is resumed without it", "changefeed", id, "by", r.By, "left_out", out, "err", err)
				return
			}
			by += fmt.Sprintf(" (not finished: %v; left out: %s; add them back: cdcctl changefeed pause %s, cdcctl changefeed update %s --add-table TABLE, cdcctl changefeed resume %s)", err, strings.Join(out, ", "), id, id, id)
			c.log.Error("coordinator: a change of the changefeed's tables could not be finished; it is resumed without the rest, tables left out of it: add them back as its last incident says", "changefeed", id, "left_out", out, "err", err)
		} else if err != nil {
			by += " (its tables' change left undone: " + err.Error() + ")"
		}
		if rerr := c.resumeRefollowed(context.WithoutCancel(ctx), term, id, r, by); errors.Is(rerr, errMovedOn) {
			c.log.Info("coordinator: the changefeed's change of tables for "+r.By+" was taken over; it is left as it is", "changefeed", id, "why", rerr)
		} else if rerr != nil {
			c.log.Warn("coordinator: could not resume the changefeed after following "+r.By+"; resume it: cdcctl changefeed resume "+string(id), "changefeed", id, "err", rerr)
		}
	}()
	if err := c.waitStopped(ctx, id, left); err != nil {
		return err
	}
	for ; r.Done < len(r.Steps); r.Done++ {
		// The record advanced in the same write as the step.
		next := r
		next.Done++
		req := UpdateRequest{ID: id, Tables: r.Steps[r.Done], By: r.By, refollow: &next}
		if r.Done == len(r.Steps)-1 {
			req.CopyAgain = r.Again
		}
		res, err := c.UpdateChangefeed(ctx, term, req)
		for try := 1; err != nil && !errors.Is(err, errMovedOn) && r.Done > 0 && try < 3 && ctx.Err() == nil; try++ {
			// A later step (a table added back) after an earlier one
			// made: tried again before the changefeed resumes without it.
			time.Sleep(time.Second)
			res, err = c.UpdateChangefeed(ctx, term, req)
		}
		if err != nil {
			return err
		}
		c.log.Info("coordinator: the changefeed follows "+r.By, "changefeed", id, "added", res.Added, "removed", res.Removed)
	}
	return nil
}

// stillRefollowing refuses (errMovedOn) a step of the coordinator's
// change r, or its resume, once the change is no longer the
// coordinator's as r left it: an operator resumed the changefeed (its
// run moved) or updated it (the record taken over) while the coordinator
// waited for the dispatchers to stop, or made a step; its step would
// undo the operator's change, and its resume resume a changefeed the
// operator keeps paused. A record gone without either (a status write by
// a capture of an earlier version, which does not know it) does not stop
// the change.
func stillRefollowing(e *meta.ChangefeedEntry, r model.Refollow) error {
	s := e.Status.Refollow
	switch {
	case e.Status.State != model.ChangefeedPaused || r.Run != nil && e.Status.Run != *r.Run:
		// (A record written before records kept the run: a resume and a
		// pause since are not told from its loss.)
		return fmt.Errorf("%w: it was resumed (or failed) while the coordinator changed its tables, which takes the change over", errMovedOn)
	case s == nil:
		return nil
	case s.TakenOver != "":
		return fmt.Errorf("%w: %s updated it while the coordinator changed its tables, which takes the change over", errMovedOn, s.TakenOver)
	case s.By != r.By || !s.Since.Equal(r.Since) || s.Done != r.Done:
		return fmt.Errorf("%w: another change of its tables is under way", errMovedOn)
	}
	return nil
}

// resumeRefollowed resumes a changefeed paused for the coordinator's
// change r, while r is still stored as it left it.
func (c *Coordinator) resumeRefollowed(ctx context.Context, term election.Term, id model.ChangefeedID, r model.Refollow, by string) error {
	return c.writeStatus(ctx, id, func(e *meta.ChangefeedEntry) error {
		if err := stillRefollowing(e, r); err != nil {
			return err
		}
		return c.store.SetChangefeedState(ctx, term.Fence, e, model.ChangefeedNormal, by)
	})
}

// finishLeft finishes a change of a changefeed's tables that an earlier
// coordinator began and did not end (it paused the changefeed and
// stopped), as its record in the stored status says.
func (c *Coordinator) finishLeft(ctx context.Context, term election.Term, id model.ChangefeedID) {
	st, err := c.store.LoadChangefeed(ctx, id)
	if err != nil {
		return // the next round reads it again
	}
	e, ok := st.Changefeeds[id]
	if !ok || e.Status.State != model.ChangefeedPaused || !e.Status.Refollow.Active() {
		return // resumed or updated meanwhile (this node's view was behind)
	}
	r := *e.Status.Refollow
	c.log.Warn("coordinator: a changefeed is paused in the middle of a change of its tables (its coordinator stopped, or a step failed); making the rest and resuming it", "changefeed", id, "by", r.By, "since", r.Since, "steps_made", r.Done, "steps", len(r.Steps))
	if err := c.finishRefollow(ctx, term, id, r, true); err != nil && ctx.Err() == nil {
		c.log.Warn("coordinator: the rest of the change of the changefeed's tables failed", "changefeed", id, "err", err)
	}
}

// waitStopped waits until every partition of a paused changefeed placed
// on a live capture has stopped: its final position is persisted for its
// placement. left says the changefeed was paused by an earlier
// coordinator.
func (c *Coordinator) waitStopped(ctx context.Context, id model.ChangefeedID, left bool) error {
	wctx, cancel := context.WithTimeout(ctx, c.FollowWait)
	defer cancel()
	for {
		ch := c.view.Changed()
		st := c.view.State()
		stopped, running := true, ""
		for pid, r := range st.Partitions[id] {
			if _, alive := st.Nodes[r.Route.Node]; !alive {
				// Not placed, or its node is gone (a coordinator that
				// stopped with the changefeed paused may have been on
				// it): nothing more comes from it; it resumes from its
				// checkpoint.
				continue
			}
			p, ok := st.Progress[id][pid]
			if left && (!ok || p.Progress.Epoch < r.Route.Epoch) {
				// Placed again since its last position (its node went
				// away with the coordinator): a capture starts nothing
				// of a paused changefeed, and what ran before the pause
				// has long reported where it stopped.
				continue
			}
			if !ok || !p.Progress.Final || p.Progress.Epoch != r.Route.Epoch {
				stopped, running = false, fmt.Sprintf("partition %s on %s (placement %d, its last position's %d, final %v)", pid, r.Route.Node, r.Route.Epoch, p.Progress.Epoch, p.Progress.Final)
				break
			}
		}
		if stopped {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("its dispatchers did not all stop within %s: %s", c.FollowWait, running)
		case <-ch:
		case <-time.After(200 * time.Millisecond):
		}
	}
}
