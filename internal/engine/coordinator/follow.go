package coordinator

// Changefeeds with table rules (tables=public.*,!public.audit) follow
// them: every FollowEvery the coordinator matches the rules against the
// database again, and when the tables differ, it pauses the changefeed,
// updates its tables (UpdateChangefeed: a new table is copied and
// streamed, a dropped one's partitions end, a renamed one is replicated
// under its new name) and resumes it. The pause is graceful: nothing is
// lost or written twice, the lag grows by the few seconds it takes.

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// followBy names the table rules in the incidents of the pauses and
// resumes they make; remedyBy, a held table's remedy (remedyHeld).
const (
	followBy = "its table rules"
	remedyBy = "a held table's remedy"
)

// followFilters matches every changefeed's table rules again, every
// FollowEvery, until ctx ends.
func (c *Coordinator) followFilters(ctx context.Context, term election.Term) {
	waits, failed := map[waitKey]stall{}, map[waitKey]time.Time{}
	if c.FollowEvery <= 0 {
		return
	}
	// A round at once: a change the previous coordinator left in the
	// middle is finished now, not a round later.
	c.followOnce(ctx, term, waits, failed)
	every(ctx, c.FollowEvery, func() { c.followOnce(ctx, term, waits, failed) })
}

// waitKey names a table leaving a changefeed.
type waitKey struct {
	cf    model.ChangefeedID
	table string
}

// stall is a table leaving a changefeed that is behind: the database's
// clock when its rules first no longer matched it (what it must pass),
// its partitions' lowest position, and since when they have been there.
type stall struct {
	target, low model.Ts
	since       time.Time
	logged      time.Time // when the wait was last logged
}

// followStall is how long a table leaving a changefeed may stay behind
// without advancing before its rules are followed anyway: its partitions
// may never pass the change (a table dropped while it was copied cannot
// finish its copy).
const followStall = 10 * time.Second

// renameStall is followStall for a rename a held table's remedy
// follows: ended before its partitions pass it, the table's last changes
// under its old name would not be written, so a stall is waited out
// longer (a partition that cannot pass it at all is still let go).
const renameStall = 30 * time.Second

// dropStall is followStall for a table dropped upstream that a remedy
// ends: never given up on (its copy done, its partitions will pass the
// drop; the table only stays reported until they do).
const dropStall = time.Duration(math.MaxInt64)

// followOnce matches every normal changefeed's table rules once.
func (c *Coordinator) followOnce(ctx context.Context, term election.Term, waits map[waitKey]stall, failed map[waitKey]time.Time) {
	st := c.view.State()
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		if busy(st.Partitions[id]) {
			continue // a plan moving or splitting its partitions goes first
		}
		if e.Status.State == model.ChangefeedPaused && e.Status.Refollow.Active() {
			c.finishLeft(ctx, term, id)
			continue
		}
		if e.Status.State != model.ChangefeedNormal {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		f, ok, err := sources.Follow(fctx, e.Info.SourceURI, e.Status.SourcePosition)
		cancel()
		if !ok {
			c.remedyHeld(ctx, term, st, e, waits, failed)
			continue
		}
		if err != nil {
			c.log.Warn("coordinator: cannot match the changefeed's table rules; trying again later", "changefeed", id, "err", err)
			continue
		}
		current := tablesOf(e.Info.SourceURI)
		if sameTables(current, f.Tables) {
			// (Renames the rules follow; a table to copy again is
			// removed and added back as without them.)
			c.remedyHeld(ctx, term, st, e, waits, failed)
			continue
		}
		if len(f.Tables) == 0 {
			c.log.Warn("coordinator: the changefeed's table rules match no table any more; it keeps its tables until they match one", "changefeed", id)
			continue
		}
		copying := copyingTables(st, e)
		stalled := func(t string) time.Duration {
			if _, still := copying[t]; still {
				return followStall // dropped while it copied: it cannot pass
			}
			// Renamed or dropped after its copy: its last changes before
			// it are waited for longer (not for ever: rules that wait
			// add no new table meanwhile).
			return renameStall
		}
		if !c.leavingPassed(st, e, leaving(current, f.Tables), f.At, waits, stalled) {
			continue
		}
		if err := c.refollow(ctx, term, e, followBy, nil, f.Tables); err != nil && ctx.Err() == nil && !errors.Is(err, errMovedOn) {
			c.log.Warn("coordinator: the changefeed could not follow its table rules; trying again later", "changefeed", id, "err", err)
		}
	}
}

// leavingPassed says whether the tables leaving a changefeed have
// passed their rename or drop (passedLeaving), against the database's
// clock when the rules first stopped matching each (at, this round's,
// for a table seen leaving the first time): every round's clock is
// later than the changefeed's lag behind it. A table whose partitions
// have not moved for stalled(table) is not waited for any longer (the
// others still are). It forgets the tables' waits once they are over.
func (c *Coordinator) leavingPassed(st *meta.State, e *meta.ChangefeedEntry, tables []string, at model.Ts, waits map[waitKey]stall, stalled func(table string) time.Duration) bool {
	id := e.Info.ID
	targets := map[string]model.Ts{}
	for _, t := range tables {
		targets[t] = at
		if w, ok := waits[waitKey{id, t}]; ok {
			targets[t] = w.target
		}
	}
	for {
		ok, behind, low := passedLeaving(st, e, targets)
		if ok {
			break
		}
		k := waitKey{id, behind}
		w, seen := waits[k]
		switch {
		case !seen:
			waits[k] = stall{target: targets[behind], low: low, since: time.Now(), logged: time.Now()}
			c.log.Info("coordinator: a table leaves the changefeed (its table rules no longer match it, or it was renamed or dropped upstream); following once its reader has passed the rename or drop", "changefeed", id, "table", behind)
			return false
		case w.low != low:
			w.low, w.since = low, time.Now()
			waits[k] = w
			return false
		case time.Since(w.since) < stalled(behind):
			if time.Since(w.since) >= followStall && time.Since(w.logged) >= time.Minute {
				// Waited for however long (a drop): said now and then.
				w.logged = time.Now()
				waits[k] = w
				c.log.Info("coordinator: still waiting for a table leaving the changefeed to pass its rename or drop (a large transaction, or a sink that cannot be written?)", "changefeed", id, "table", behind, "stalled_for", time.Since(w.since).Round(time.Second))
			}
			return false
		}
		c.log.Warn("coordinator: a table leaving the changefeed has not advanced towards its rename or drop; following without waiting for it (its last changes before it may not be in the sink)", "changefeed", id, "table", behind, "stalled_for", time.Since(w.since).Round(time.Second))
		delete(targets, behind)
	}
	for _, t := range tables {
		delete(waits, waitKey{id, t})
	}
	return true
}

// stallOf is a stall duration for every table.
func stallOf(d time.Duration) func(string) time.Duration {
	return func(string) time.Duration { return d }
}

// leaving are the tables of current that next no longer has.
func leaving(current, next []string) []string {
	_, gone := source.TablesDiff(current, next)
	return gone
}

// passedLeaving says whether a changefeed has written everything the
// tables leaving it had under their names: each one's partitions are at
// or past its target (the database's clock once the rules no longer
// matched it, after the rename or drop), or just below where the reader
// holds or ended the table (a rename holds it at its first change under
// the new name). Followed before, the table's partitions ended where
// they were, and its changes between there and the rename, read again
// under a name the changefeed no longer had, were dropped. Otherwise it
// names the first table behind and its partitions' lowest position. An
// unknown target (0) is not waited for.
func passedLeaving(st *meta.State, e *meta.ChangefeedEntry, tables map[string]model.Ts) (bool, string, model.Ts) {
	upTo := maps.Clone(tables)
	for _, ti := range e.Status.Tables {
		switch t, ok := upTo[ti.Table]; {
		case !ok || t == 0 || ti.At == 0:
		case ti.State == model.TableDropped:
			upTo[ti.Table] = min(t, ti.At) // dropped there: its DROP TABLE (MySQL) written too
		default:
			upTo[ti.Table] = min(t, ti.At-1) // held there
		}
	}
	lows := lowest(st, e, upTo)
	for _, t := range slices.Sorted(maps.Keys(upTo)) {
		if low, ok := lows[t]; ok && upTo[t] != 0 && low < upTo[t] {
			return false, t, low
		}
	}
	return true, "", 0
}

// lowest is the lowest position of each of tables' partitions (none for
// a table without), in one walk of the changefeed's partitions: one walk
// a table was 100,000 partitions times the tables leaving.
func lowest(st *meta.State, e *meta.ChangefeedEntry, tables map[string]model.Ts) map[string]model.Ts {
	lows := map[string]model.Ts{}
	for pid, r := range st.Partitions[e.Info.ID] {
		t := r.Route.Span.Table
		if _, ok := tables[t]; !ok {
			continue
		}
		cp := max(st.Progress[e.Info.ID][pid].Progress.Checkpoint, e.Info.StartTs, r.Route.Since)
		if low, found := lows[t]; !found || cp < low {
			lows[t] = cp
		}
	}
	return lows
}

// busy says whether any partition is being moved or split.
func busy(routes map[string]meta.RouteRecord) bool {
	for _, r := range routes {
		if r.Route.Status != model.PartitionActive {
			return true
		}
	}
	return false
}

// sameTables says whether two table lists hold the same tables, in any
// order. Counted in a map, not looked up one in the other: at 100,000
// tables (a generator's, or a schema's) that lookup was 5·10⁹ string
// comparisons, seconds of the coordinator's CPU every follow round, and
// the changefeed's checkpoint lag rose with it.
func sameTables(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) {
		return true // the same order, as a list cloned and left alone is
	}
	n := make(map[string]int, len(a))
	for _, t := range a {
		n[t]++
	}
	for _, t := range b {
		if n[t] == 0 {
			return false
		}
		n[t]--
	}
	return true
}
