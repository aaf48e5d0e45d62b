package coordinator

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
)

// Retention bounds the history of finished plans in etcd: every record is
// read by every node's view, so an unbounded history would make each
// node's memory and each coordinator pass grow for ever.
type Retention struct {
	// Keep is how many finished plans are kept at least, newest first.
	Keep int
	// MaxAge: finished plans submitted longer ago than this, beyond Keep,
	// are deleted.
	MaxAge time.Duration
}

// DefaultRetention keeps the last 20 finished plans, and those of the
// last week up to maxFinishedPlans.
var DefaultRetention = Retention{Keep: 20, MaxAge: 7 * 24 * time.Hour}

// maxFinishedPlans is the hard cap, whatever their age.
const maxFinishedPlans = 100

// prunePlans deletes finished plans beyond the retention. Plans that are
// not over are never touched; a record written since it was read is
// left for the next pass.
func (c *Coordinator) prunePlans(ctx context.Context, term election.Term, st *meta.State, mine saved, now time.Time) error {
	type finished struct {
		id       string
		at       time.Time
		revision int64
	}
	var done []finished
	for id, raw := range st.Plans {
		// What this term saved is newer than the view, if the view lags.
		if s, ok := mine.plans[id]; ok && s.revision > raw.Revision {
			if s.rec.State.Terminal() {
				done = append(done, finished{id, s.rec.SubmittedAt, s.revision})
			}
			continue
		}
		rec, ok := planRecord(st, id)
		if !ok || !rec.State.Terminal() {
			continue
		}
		done = append(done, finished{id, rec.SubmittedAt, raw.Revision})
	}
	if len(done) <= c.Retention.Keep {
		return nil
	}
	sort.Slice(done, func(i, j int) bool { return done[i].at.After(done[j].at) })
	var firstErr error
	for i, f := range done {
		if i < c.Retention.Keep || (i < maxFinishedPlans && now.Sub(f.at) < c.Retention.MaxAge) {
			continue
		}
		err := c.store.DeletePlan(ctx, term.Fence, f.id, f.revision)
		if err == nil {
			c.log.Info("coordinator: finished plan deleted (retention)", "plan", f.id, "submitted", f.at)
			continue
		}
		if !errors.Is(err, meta.ErrStale) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
