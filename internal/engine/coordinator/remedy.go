package coordinator

// A changefeed's reader names the remedy of a table it cannot go on with
// (model.TableIssue): renamed upstream, followed under its new name; its
// key replaced, copied again; dropped, ended (or, created again under its
// name, copied in its place). The coordinator applies it as an operator
// would, in one pause (refollow), once the changefeed has written
// everything the table had before.

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

// remedyBackoff is how long a held table's remedy that failed waits
// before it is tried again.
const remedyBackoff = 10 * time.Minute

// remedyHeld applies the remedy a changefeed's reader named for tables
// it holds, as an operator would: a table renamed upstream is replaced by
// its new name (model.TableIssue.RenamedTo; set only without table rules,
// which follow renames themselves), a table to copy again gets new
// partitions that copy it, as if removed and added back (CopyAgain; the
// rules keep matching it), a table dropped upstream is removed, the sink
// told DROP TABLE, or, created again under its name meanwhile, copied in
// its place (End; rules end it themselves), in one update. Once the
// changefeed has written everything they had before their holds (or
// drops), it is paused, updated and resumed. Before, they stayed held
// (or idle) until an operator did the same.
//
// A remedy that fails (the update refused: the new name not readable, a
// publication of the operator's that lacks it) is not tried again for
// remedyBackoff: each try pauses the changefeed.
func (c *Coordinator) remedyHeld(ctx context.Context, term election.Term, st *meta.State, e *meta.ChangefeedEntry, waits map[waitKey]stall, failed map[waitKey]time.Time) {
	var held []model.TableIssue
	copying := copyingTables(st, e)
	for _, ti := range append(slices.Clone(e.Status.Tables), c.copyingAgain(ctx, e, copying)...) {
		remedied := ti.State == model.TableHeld && (ti.RenamedTo != "" || ti.CopyAgain) || ti.State == model.TableDropped && ti.End
		if !remedied || time.Since(failed[waitKey{e.Info.ID, ti.Table}]) < remedyBackoff {
			continue
		}
		switch i := slices.IndexFunc(held, func(h model.TableIssue) bool { return h.Table == ti.Table }); {
		case i < 0:
			held = append(held, ti)
		case ti.State == model.TableDropped:
			// Held, then dropped (a renamed table's new name dropped):
			// what is left to do is end it.
			held[i] = ti
		}
	}
	if len(held) == 0 {
		return // (before the source is opened to name its tables: every round, for every changefeed)
	}
	current := tablesOf(e.Info.SourceURI)
	// Each remedy is applied once the changefeed has written everything
	// its table had before its hold or drop, each by its own wait (one
	// still waited for does not hold the others back). A rename waits for
	// its partitions longer (renameStall): ended before they pass it, the
	// table's last changes under its old name would never be written; a
	// drop for as long as it takes, unless the table was still copying
	// (it cannot pass the drop); a table copied again loses nothing: its
	// copy replaces what the sink holds of it.
	var ready []model.TableIssue
	for _, ti := range held {
		stalled := followStall
		if _, still := copying[ti.Table]; ti.State == model.TableDropped && !still {
			stalled = dropStall
		} else if ti.RenamedTo != "" {
			stalled = renameStall
		}
		if slices.Contains(current, ti.Table) && c.leavingPassed(st, e, []string{ti.Table}, ti.At, waits, stallOf(stalled)) {
			ready = append(ready, ti)
		}
	}
	held = ready
	next := slices.Clone(current)
	var again []string
	var dropped []model.TableIssue
	for _, ti := range held {
		i := slices.Index(next, ti.Table)
		switch {
		case ti.State == model.TableDropped:
			dropped = append(dropped, ti) // ended or copied: below
		case ti.RenamedTo != "" && !slices.Contains(next, ti.RenamedTo):
			next[i] = ti.RenamedTo
		case ti.CopyAgain:
			again = append(again, ti.Table)
		}
	}
	if sameTables(current, next) && len(again)+len(dropped) == 0 {
		return
	}
	refused := c.remedyRefused(ctx, e.Info.SourceURI, held)
	back, gone := c.droppedNow(ctx, e, dropped, refused)
	again = append(again, back...)
	next = slices.DeleteFunc(next, func(t string) bool { return slices.Contains(gone, t) })
	if len(next) == 0 {
		// A changefeed's only table, dropped, stays reported: a
		// changefeed needs a table (a table created under its name
		// later is copied in its place).
		next = slices.Clone(current)
		for _, t := range gone {
			refused[t] = "dropped, and a changefeed needs a table (remove the changefeed; or create a table under its name, which is copied in its place unless the changefeed has snapshot=never)"
		}
	}
	if len(refused) > 0 {
		// Those are left out for a while; the others' remedies are
		// applied at the next round.
		for _, t := range slices.Sorted(maps.Keys(refused)) {
			failed[waitKey{e.Info.ID, t}] = time.Now()
			c.log.Warn("coordinator: a held or dropped table's remedy is not applied: "+refused[t]+"; its reason in 'cdcctl changefeed get' says what to do yourself; looked at again in "+remedyBackoff.String(), "changefeed", e.Info.ID, "table", t)
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

// droppedNow sorts tables dropped upstream by what their names are now:
// back, a table again that a changefeed can take (created again: copied
// in the dropped one's place, where the source lets it: CopyAgain), or
// gone (no table, or one not to copy: ended). A name that is
// a table again that a changefeed cannot take (no key), or that cannot
// be looked up, is refused (with why): the operator chooses.
func (c *Coordinator) droppedNow(ctx context.Context, e *meta.ChangefeedEntry, dropped []model.TableIssue, refused map[string]string) (back, gone []string) {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ti := range dropped {
		t := ti.Table
		switch why := takeable(pctx, e.Info.SourceURI, t); {
		case why == "" && !ti.CopyAgain:
			gone = append(gone, t)
			c.log.Warn("coordinator: a table dropped upstream is ended; a table created again under its name is not replicated (snapshot=never): add it with 'cdcctl changefeed update --add-table' if it should be", "changefeed", e.Info.ID, "table", t)
		case why == "":
			back = append(back, t)
		case strings.Contains(why, "does not exist"): // (both sources say so)
			gone = append(gone, t)
		default:
			refused[t] = "a table is under its name again that cannot be replicated, or the name cannot be looked up: " + why
		}
	}
	return back, gone
}

// takeable says why a changefeed of the source URI uri could not take
// table t now ("" if it could).
func takeable(ctx context.Context, uri, t string) string {
	f, err := sources.Preview(ctx, withTables(uri, []string{t}))
	switch {
	case err != nil:
		return err.Error()
	case len(f.Refused) > 0:
		return strings.Join(f.Refused, "; ")
	}
	return ""
}

// copyingAgain are a changefeed's tables whose initial snapshot cannot
// copy on because their primary key changed while they copied (their
// partitions' ranges and what they copied are in the old key's terms),
// as held tables to copy again: the remedy their copy's error names,
// where the source URI lets the coordinator apply it (auto-remedy).
// Before, the table's copy, and the changefeed's checkpoint with it,
// stopped until an operator removed the table and added it back.
func (c *Coordinator) copyingAgain(ctx context.Context, e *meta.ChangefeedEntry, still map[string]source.CopyingTable) []model.TableIssue {
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

// copyingTables are a changefeed's tables whose initial snapshot is not
// done, from its partitions' progress (source.CopyingTables).
func copyingTables(st *meta.State, e *meta.ChangefeedEntry) map[string]source.CopyingTable {
	spans, pt := map[string]model.Span{}, model.ProgressTable{}
	for pid, r := range st.Partitions[e.Info.ID] {
		spans[pid], pt[pid] = r.Route.Span, st.Progress[e.Info.ID][pid].Progress
	}
	still, _ := source.CopyingTables(spans, pt)
	return still
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
	takeable := func(t string) string { return takeable(pctx, uri, t) }
	out := map[string]string{}
	for _, ti := range held {
		switch {
		case ti.State == model.TableDropped:
			// (Ended, or copied again: droppedNow.)
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
