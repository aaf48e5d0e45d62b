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
	"net/url"
	"slices"
	"strings"
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

// remedyBackoff is how long a held table's remedy that failed waits
// before it is tried again.
const remedyBackoff = 10 * time.Minute

// followOnce matches every normal changefeed's table rules once.
func (c *Coordinator) followOnce(ctx context.Context, term election.Term, waits map[waitKey]stall, failed map[waitKey]time.Time) {
	st := c.view.State()
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		if busy(st.Partitions[id]) {
			continue // a plan moving or splitting its partitions goes first
		}
		if e.Status.State == model.ChangefeedPaused && e.Status.Refollow != nil {
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
		if !c.leavingPassed(st, e, leaving(current, f.Tables), f.At, waits, followStall) {
			continue
		}
		if err := c.refollow(ctx, term, e, followBy, nil, f.Tables); err != nil && ctx.Err() == nil && !errors.Is(err, errMovedOn) {
			c.log.Warn("coordinator: the changefeed could not follow its table rules; trying again later", "changefeed", id, "err", err)
		}
	}
}

// remedyHeld applies the remedy a changefeed's reader named for tables
// it holds, as an operator would: a table renamed upstream is replaced by
// its new name (model.TableIssue.RenamedTo; set only without table rules,
// which follow renames themselves), a table to copy again gets new
// partitions that copy it, as if removed and added back (CopyAgain; the
// rules keep matching it), in one update.
// Once the changefeed has written everything they had before their
// holds, it is paused, updated and resumed. Before, they stayed held until an operator did the same.
//
// A remedy that fails (the update refused: the new name not readable, a
// publication of the operator's that lacks it) is not tried again for
// remedyBackoff: each try pauses the changefeed.
func (c *Coordinator) remedyHeld(ctx context.Context, term election.Term, st *meta.State, e *meta.ChangefeedEntry, waits map[waitKey]stall, failed map[waitKey]time.Time) {
	var held []model.TableIssue
	for _, ti := range append(slices.Clone(e.Status.Tables), c.copyingAgain(ctx, st, e)...) {
		if ti.State == model.TableHeld && (ti.RenamedTo != "" || ti.CopyAgain) && time.Since(failed[waitKey{e.Info.ID, ti.Table}]) >= remedyBackoff &&
			!slices.ContainsFunc(held, func(h model.TableIssue) bool { return h.Table == ti.Table }) {
			held = append(held, ti)
		}
	}
	if len(held) == 0 {
		return
	}
	current := tablesOf(e.Info.SourceURI)
	next := slices.Clone(current)
	var again []string
	var at model.Ts
	renames := false
	for _, ti := range held {
		i := slices.Index(next, ti.Table)
		switch {
		case i < 0:
			continue
		case ti.RenamedTo != "" && !slices.Contains(next, ti.RenamedTo):
			next[i], renames = ti.RenamedTo, true
		case ti.CopyAgain:
			again = append(again, ti.Table)
		default:
			continue
		}
		at = max(at, ti.At)
	}
	// Everything the held tables had before their holds is written
	// first. A rename waits for its partitions longer (renameStall):
	// ended before they pass it, the table's last changes under its old
	// name would never be written (a table copied again loses nothing:
	// its copy replaces what the sink holds of it).
	stalled := followStall
	if renames {
		stalled = renameStall
	}
	if sameTables(current, next) && len(again) == 0 || !c.leavingPassed(st, e, append(leaving(current, next), again...), at, waits, stalled) {
		return
	}
	if refused := c.remedyRefused(ctx, e.Info.SourceURI, held); len(refused) > 0 {
		// Those are left out for a while; the others' remedies are
		// applied at the next round.
		for _, t := range slices.Sorted(maps.Keys(refused)) {
			failed[waitKey{e.Info.ID, t}] = time.Now()
			c.log.Warn("coordinator: a held table's remedy is not applied: "+refused[t]+"; its reason in 'cdcctl changefeed get' says what to do; looked at again in "+remedyBackoff.String(), "changefeed", e.Info.ID, "table", t)
		}
		return
	}
	// One update: a table copied again keeps its place, its partitions
	// replaced by new ones that copy it (also a changefeed's only table).
	if err := c.refollow(ctx, term, e, remedyBy, again, next); err != nil && ctx.Err() == nil && !errors.Is(err, errMovedOn) {
		for _, ti := range held {
			failed[waitKey{e.Info.ID, ti.Table}] = time.Now()
		}
		c.log.Warn("coordinator: the changefeed could not apply a held table's remedy (its reason in 'cdcctl changefeed get' says how to apply it yourself); trying again in "+remedyBackoff.String(), "changefeed", e.Info.ID, "err", err)
	}
}

// copyingAgain are a changefeed's tables whose initial snapshot cannot
// copy on because their primary key changed while they copied (their
// partitions' ranges and what they copied are in the old key's terms),
// as held tables to copy again: the remedy their copy's error names,
// where the source URI lets the coordinator apply it (auto-remedy).
// Before, the table's copy, and the changefeed's checkpoint with it,
// stopped until an operator removed the table and added it back.
func (c *Coordinator) copyingAgain(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry) []model.TableIssue {
	spans, pt := map[string]model.Span{}, model.ProgressTable{}
	for pid, r := range st.Partitions[e.Info.ID] {
		spans[pid], pt[pid] = r.Route.Span, st.Progress[e.Info.ID][pid].Progress
	}
	still, _ := source.CopyingTables(spans, pt)
	if len(still) == 0 {
		return nil
	}
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	why := sources.KeysChangedWhileCopying(kctx, e.Info.SourceURI, still)
	var out []model.TableIssue
	for _, t := range slices.Sorted(maps.Keys(why)) {
		out = append(out, model.TableIssue{Table: t, State: model.TableHeld, CopyAgain: true, Since: time.Now().UTC(), Reason: why[t]})
	}
	return out
}

// remedyRefused are the held tables whose remedy is not to be applied
// now, each with why, checked against the database before the
// changefeed is paused (the source found the remedy when it held the
// table, and the database may have moved on since): a table to copy
// again, or a renamed table's new name, that a changefeed could not take
// now (gone, renamed again, no key); a renamed table's old name that is
// a table again (two tables swapped in two statements: which to follow
// is the operator's choice).
func (c *Coordinator) remedyRefused(ctx context.Context, uri string, held []model.TableIssue) map[string]string {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	takeable := func(t string) string {
		f, err := sources.Preview(pctx, withTables(uri, []string{t}))
		switch {
		case err != nil:
			return err.Error()
		case len(f.Refused) > 0:
			return strings.Join(f.Refused, "; ")
		}
		return ""
	}
	out := map[string]string{}
	for _, ti := range held {
		switch {
		case ti.RenamedTo != "":
			if why := takeable(ti.RenamedTo); why != "" {
				out[ti.Table] = why
			} else if why := takeable(ti.Table); !strings.Contains(why, "does not exist") {
				// A table again under its old name, takeable or not
				// (CREATE TABLE old (LIKE new) has no key), or not
				// known: followed only when the name is free. (Both
				// sources say "does not exist" of a missing table.)
				out[ti.Table] = ti.Table + " is a table again under its old name (a swap?)"
				if why != "" {
					out[ti.Table] += ", or cannot be looked up: " + why
				}
			}
		case ti.CopyAgain:
			if why := takeable(ti.Table); why != "" {
				out[ti.Table] = why
			}
		}
	}
	return out
}

// withTables is uri naming tables one by one, its table rules left out:
// what checks those tables alone.
func withTables(uri string, tables []string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	q.Del("filter")
	q.Set("tables", strings.Join(tables, ","))
	u.RawQuery = q.Encode()
	return u.String()
}

// leavingPassed says whether the tables leaving a changefeed have
// passed their rename or drop (passedLeaving), against the database's
// clock when the rules first stopped matching each (at, this round's,
// for a table seen leaving the first time): every round's clock is
// later than the changefeed's lag behind it. A table whose partitions
// have not moved for followStall is not waited for any longer. It
// forgets the changefeed's waits once they are over.
func (c *Coordinator) leavingPassed(st *meta.State, e *meta.ChangefeedEntry, tables []string, at model.Ts, waits map[waitKey]stall, stalled time.Duration) bool {
	id := e.Info.ID
	targets := map[string]model.Ts{}
	for _, t := range tables {
		targets[t] = at
		if w, ok := waits[waitKey{id, t}]; ok {
			targets[t] = w.target
		}
	}
	ok, behind, low := passedLeaving(st, e, targets)
	if !ok {
		k := waitKey{id, behind}
		w, seen := waits[k]
		switch {
		case !seen:
			waits[k] = stall{target: targets[behind], low: low, since: time.Now()}
			c.log.Info("coordinator: a table leaves the changefeed (its table rules no longer match it, or it was renamed upstream); following once its reader has passed the rename or drop", "changefeed", id, "table", behind)
			return false
		case w.low != low:
			w.low, w.since = low, time.Now()
			waits[k] = w
			return false
		case time.Since(w.since) < stalled:
			return false
		}
		c.log.Warn("coordinator: a table leaving the changefeed has not advanced towards its rename or drop; following the table rules without waiting (its last changes before it may not be in the sink)", "changefeed", id, "table", behind, "stalled_for", time.Since(w.since).Round(time.Second))
	}
	maps.DeleteFunc(waits, func(k waitKey, _ stall) bool { return k.cf == id })
	return true
}

// leaving are the tables of current that next no longer has.
func leaving(current, next []string) []string {
	var out []string
	for _, t := range current {
		if !slices.Contains(next, t) {
			out = append(out, t)
		}
	}
	return out
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
	for _, t := range slices.Sorted(maps.Keys(tables)) {
		upTo := tables[t]
		if upTo == 0 {
			continue
		}
		for _, ti := range e.Status.Tables {
			if ti.Table == t && ti.At != 0 {
				upTo = min(upTo, ti.At-1) // held or dropped there
			}
		}
		if low, ok := lowest(st, e, t); ok && low < upTo {
			return false, t, low
		}
	}
	return true, "", 0
}

// lowest is the lowest position of a table's partitions; false when it
// has none.
func lowest(st *meta.State, e *meta.ChangefeedEntry, table string) (model.Ts, bool) {
	var low model.Ts
	found := false
	for pid, r := range st.Partitions[e.Info.ID] {
		if r.Route.Span.Table != table {
			continue
		}
		if cp := max(st.Progress[e.Info.ID][pid].Progress.Checkpoint, e.Info.StartTs, r.Route.Since); !found || cp < low {
			low, found = cp, true
		}
	}
	return low, found
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

// sameTables says whether two table lists hold the same tables.
func sameTables(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) {
			return false
		}
	}
	return true
}
