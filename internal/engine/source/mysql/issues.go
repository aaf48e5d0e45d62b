package mysql

import (
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

// report records a table's issue (one per table and state).
func (p *Puller) report(table string, state string, at model.Ts, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.ContainsFunc(p.issues, func(i source.TableIssue) bool { return i.Table == table && i.State == state }) {
		return
	}
	p.issues = append(p.issues, source.TableIssue{Table: table, State: state, At: at, Since: time.Now().UTC(), Reason: reason})
	slices.SortFunc(p.issues, func(a, b source.TableIssue) int { return strings.Compare(a.Table, b.Table) })
}

// heldReason says why a table is held and what to do: its partitions
// stop before the change while the other tables go on.
func heldReason(cf model.ChangefeedID, table, why string) string {
	return fmt.Sprintf("%s; its changes from here on are not replicated and the other tables go on: to replicate it again, remove it from the changefeed and add it back, which copies it again ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed update %s --add-table %s' under the name it has now, 'cdcctl changefeed resume %s')",
		why, cf, cf, table, cf, table, cf)
}

// droppedReason says what to do about a table dropped upstream.
func droppedReason(cf model.ChangefeedID, table string) string {
	return fmt.Sprintf("dropped upstream: every change before the drop was replicated, and the sink got the DROP TABLE; nothing more comes: remove it from the changefeed ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed resume %s'); a table created again under this name can then be added back ('cdcctl changefeed update %s --add-table %s': the sink's old rows are truncated, the new table's copied)",
		cf, cf, table, cf, cf, table)
}
