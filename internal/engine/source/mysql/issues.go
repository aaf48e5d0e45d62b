package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TableIssues implements source.IssueReporter: the tables this run of
// the reader holds or found dropped, for the changefeed's status ('cdcctl
// changefeed get' lists them with what to do).
func (p *Puller) TableIssues() []source.TableIssue {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.issues)
}

// reportIssue records a table's issue (one per table and state).
func (p *Puller) reportIssue(ti source.TableIssue) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.ContainsFunc(p.issues, func(i source.TableIssue) bool { return i.Table == ti.Table && i.State == ti.State }) {
		return
	}
	ti.Since = time.Now().UTC()
	p.issues = append(p.issues, ti)
	slices.SortFunc(p.issues, func(a, b source.TableIssue) int { return strings.Compare(a.Table, b.Table) })
}

// holder holds tables for one run of the reader (Pull): a held table's
// partitions stop below the change that held it (LogWriter.Hold) while
// the others go on, and the changefeed's status says why and what to do.
type holder struct {
	p       *Puller
	w       source.LogWriter
	at      *position // the reader's position: a hold is just past it
	held    map[string]bool
	catalog func() (*sql.DB, error)
}

// hold holds a table for why, with the operator's remedy.
func (h *holder) hold(table, why string) {
	h.mark(source.TableIssue{Table: table, Reason: heldReason(h.p.cf, table, why)})
	h.p.log.Warn("mysql source: a table is held; the others go on", "changefeed", h.p.cf, "table", table, "reason", why)
}

// mark holds ti.Table and reports ti.
func (h *holder) mark(ti source.TableIssue) {
	h.held[ti.Table] = true
	ti.State, ti.At = source.TableHeld, h.at.Ts+1
	h.w.Hold(ti.Table, ti.At)
	h.p.reportIssue(ti)
}

// renamed holds a table renamed upstream. Where its old name stays free
// the issue says where it went, and a changefeed of tables named one by
// one follows it there (model.TableIssue.RenamedTo); a name taken again
// in the statement (a swap) or since leaves the choice to the operator,
// and so does a new name that is not a table now (renamed again since:
// followed at that rename). Not with snapshot=never: the new name would
// not be copied.
func (h *holder) renamed(ctx context.Context, table, to, stmt string, taken bool) {
	cfg := h.p.cfg
	if !cfg.AutoRemedy || cfg.Snapshot == "never" || len(cfg.Filter) > 0 || taken || nameTaken(ctx, h.catalog, table) || !nameTaken(ctx, h.catalog, to) {
		h.hold(table, "renamed upstream to "+to+" ("+stmt+")")
		return
	}
	h.mark(source.TableIssue{Table: table, Reason: renameFollowedReason(h.p.cf, table, to, stmt), RenamedTo: to})
	h.p.log.Warn("mysql source: a table was renamed upstream; it is held until the changefeed follows it under its new name", "changefeed", h.p.cf, "table", table, "to", to)
}

// toCopy holds a table for a change that copying it again undoes (its
// key changed, rows came in that the binary log does not carry, a
// statement not followed); the changefeed copies it again by itself
// where it has a primary key now (model.TableIssue.CopyAgain).
func (h *holder) toCopy(ctx context.Context, table, why string) {
	cfg := h.p.cfg
	if !cfg.AutoRemedy || cfg.Snapshot == "never" || !hasPrimaryKey(ctx, h.catalog, table) {
		h.hold(table, why)
		return
	}
	h.mark(source.TableIssue{Table: table, Reason: copyAgainReason(h.p.cf, table, why), CopyAgain: true})
	h.p.log.Warn("mysql source: a table is held until the changefeed copies it again; the others go on", "changefeed", h.p.cf, "table", table, "reason", why)
}

// nameTaken says a table or view has name ("db.table") now; one that
// cannot be read is taken (a rename is then held, as before, not
// followed).
func nameTaken(ctx context.Context, catalog func() (*sql.DB, error), name string) bool {
	n, ok := countOf(ctx, catalog, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?`, name)
	return !ok || n > 0
}

// hasPrimaryKey says a table ("db.table") has a primary key now (what
// adding it back to a changefeed needs); false when that cannot be read.
// STATISTICS, as SHOW KEYS: MariaDB shows a user with only SELECT on the
// table (the grants docs/mysql.md asks for) no TABLE_CONSTRAINTS, and
// every table such a changefeed was to copy again by itself was held
// for the operator instead.
func hasPrimaryKey(ctx context.Context, catalog func() (*sql.DB, error), name string) bool {
	n, ok := countOf(ctx, catalog, `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY'`, name)
	return ok && n > 0
}

// countOf counts what a catalog query finds of a table ("db.table",
// the query's two parameters); false when it cannot be read.
func countOf(ctx context.Context, catalog func() (*sql.DB, error), query, name string) (int, bool) {
	db, err := catalog()
	if err != nil {
		return 0, false
	}
	schema, table := model.SplitTableName(name)
	var n int
	if err := db.QueryRowContext(ctx, query, schema, table).Scan(&n); err != nil {
		return 0, false
	}
	return n, true
}

// copyAgainReason says why a table is held when the changefeed copies it
// again by itself.
func copyAgainReason(cf model.ChangefeedID, table, why string) string {
	return heldReason(cf, table, why) + "; the changefeed does so by itself within the coordinator's --follow-tables-every, once every change before this one is written (the source URI's auto-remedy=false leaves it to you)"
}

// renameFollowedReason says why a table renamed upstream is held when
// the changefeed follows it under its new name by itself.
func renameFollowedReason(cf model.ChangefeedID, from, to, stmt string) string {
	return fmt.Sprintf("renamed upstream to %s (%s); the changefeed follows it there by itself within the coordinator's --follow-tables-every, as table rules do: its rows are copied again under the new name and the sink gets a DROP TABLE of the old one (to do it now: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s --add-table %s', 'cdcctl changefeed resume %s'; the source URI's auto-remedy=false leaves renamed tables held)",
		to, stmt, cf, cf, from, to, cf)
}

// heldReason says why a table is held and what to do: its partitions
// stop before the change while the other tables go on.
func heldReason(cf model.ChangefeedID, table, why string) string {
	return fmt.Sprintf("%s; its changes from here on are not replicated and the other tables go on: to replicate it again, copy it again ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s', 'cdcctl changefeed resume %s'; renamed, under the name it has now: 'cdcctl changefeed update %s --remove-table %s --add-table NEW')",
		why, cf, cf, table, cf, cf, table)
}

// reportDropped reports a table dropped upstream at at. Without table
// rules (which end it themselves) and with auto-remedy, the changefeed
// ends it by itself (model.TableIssue.End), or copies a table created
// again under its name in its place (not with snapshot=never).
func (p *Puller) reportDropped(table string, at model.Ts) {
	end := p.cfg.AutoRemedy && len(p.cfg.Filter) == 0
	why := droppedReason(p.cf, table)
	if end {
		why = droppedEnded(p.cf, table, p.cfg.Snapshot != "never")
	}
	p.reportIssue(source.TableIssue{Table: table, State: source.TableDropped, At: at, Reason: why, End: end, CopyAgain: end && p.cfg.Snapshot != "never"})
}

// droppedEnded is a dropped table's reason where the changefeed ends it
// by itself; copy says a table created again under its name is copied in
// its place (not with snapshot=never).
func droppedEnded(cf model.ChangefeedID, table string, copy bool) string {
	again := fmt.Sprintf("a table created again under its name is not replicated (snapshot=never; add it: 'cdcctl changefeed update %s --add-table %s' while paused)", cf, table)
	if copy {
		again = "or, if a table is created again under its name by then, copies the new one in its place"
	}
	return fmt.Sprintf("dropped upstream: every change before the drop was replicated, and the sink got the DROP TABLE; the changefeed ends the table by itself, %s; a changefeed's only table stays (remove the changefeed: 'cdcctl changefeed remove %s'); to end it yourself: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed resume %s'",
		again, cf, cf, cf, table, cf)
}

// droppedReason says what to do about a table dropped upstream.
func droppedReason(cf model.ChangefeedID, table string) string {
	return fmt.Sprintf("dropped upstream: every change before the drop was replicated, and the sink got the DROP TABLE; nothing more comes: remove it from the changefeed ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed resume %s'); a table created again under this name can then be added back ('cdcctl changefeed update %s --add-table %s': the sink's old rows are truncated, the new table's copied)",
		cf, cf, table, cf, cf, table)
}
