package postgres

// One table's trouble never stops the others. A table that cannot go on
// in this run of the reader (renamed upstream, a row or a schema that
// does not decode) is held: nothing of it at or above the transaction
// where it failed is read, so its partitions' checkpoints stay just
// below while the other tables advance; a new run (a resume, or a
// pause, an update and a resume) reads it again from there. A table
// dropped upstream is not held (nothing of it comes any more): it is
// reported, so the operator can remove it from the changefeed.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Hold is a table held at a position, and why.
type Hold struct {
	Table  string
	At     model.Ts
	Reason string
	// RenamedTo is a table's new name, held for its rename where its old
	// name is free (model.TableIssue.RenamedTo).
	RenamedTo string
	// CopyAgain says the changefeed copies it again by itself
	// (model.TableIssue.CopyAgain).
	CopyAgain bool
	// away: held for a rename found in the catalog, not in the stream
	// (renamedAway), from a position past it: rows the stream still
	// reads under the old name are from before the rename, not held.
	away bool
}

// hold holds a table at the open transaction (or after the last
// position handed out), once.
func (s *Stream) hold(table, reason string) { s.holdAs(Hold{Table: table, Reason: reason}) }

// holdAs holds h.Table as hold does.
func (s *Stream) holdAs(h Hold) {
	at := s.last + 1
	if s.open {
		at = s.base
	}
	s.holdAt(h, at)
}

// holdAt holds h.Table from at on.
func (s *Stream) holdAt(h Hold, at model.Ts) {
	if _, done := s.held[h.Table]; done {
		return
	}
	h.At = at
	s.held[h.Table] = h
	s.holds = append(s.holds, h)
}

// holdRenamed holds a table (relation rel) renamed upstream to name.
// Where no relation has its old name now and the relation still has the
// new one, the hold says where it went, and a changefeed of tables named
// one by one follows it there (model.TableIssue.RenamedTo): a name taken
// again (two tables swapped, a new one created under it) leaves the
// choice to the operator, who may want the name followed; one renamed
// again since is followed at its next name's hold. Not with
// snapshot=never: the new name would not be copied.
func (s *Stream) holdRenamed(ctx context.Context, rel uint32, from, to string) error {
	h, err := s.renamed(ctx, rel, from, to)
	if err != nil {
		return err
	}
	s.holdAs(h)
	return nil
}

// renamed is the hold of a table (relation rel) renamed upstream to to
// (holdRenamed). An error is awaitVisible's: the stream ends and is read
// again, as for any table.
func (s *Stream) renamed(ctx context.Context, rel uint32, from, to string) (Hold, error) {
	h := Hold{Table: from, Reason: renameHold(s.changefeed(), from, to)}
	var follow bool
	// The catalog is asked once it shows the transaction the rename is
	// in: the walsender sends a transaction as soon as its commit is in
	// the WAL, before its backend makes it visible, and asked in between
	// (a loaded machine) the catalog still had the old name, and the
	// rename was left to the operator (the tables runbook, now and then
	// in CI: the reason said it, not an error). Asked again a few times
	// too: the answer is the hold's for good.
	if err := s.awaitVisible(ctx); err != nil {
		return h, err
	}
	var err error
	for try := 1; ; try++ {
		err = s.cat.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL AND to_regclass($2) = $3::int8::oid`, quoteQualified(from), quoteQualified(to), int64(rel)).Scan(&follow)
		if err == nil || ctx.Err() != nil || try == 5 {
			break
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			break
		}
	}
	switch {
	case err != nil:
		h.Reason += " (whether the changefeed could follow it by itself could not be checked: " + err.Error() + ")"
	case follow && s.cfg.AutoRemedy && s.cfg.Snapshot != "never" && len(s.cfg.Filter) == 0:
		h.RenamedTo = to
		h.Reason = renameFollowed(s.changefeed(), from, to)
	}
	return h, nil
}

// renamedAway are the changefeed's tables not held whose relation has
// another name now, by that name: renamed upstream and not written since
// (a row under the new name is met as a rename by the stream, which
// then holds the table). Left to the stream, such a table was never
// held: an archive's "RENAME TO orders_old; CREATE TABLE orders" left
// orders neither held nor reported for as long as orders_old was idle.
func (s *Stream) renamedAway(ctx context.Context) (map[string]renamedTo, error) {
	var oids []uint32
	for t, st := range s.tables {
		if _, held := s.held[t]; st.OID != 0 && !held {
			oids = append(oids, st.OID)
		}
	}
	if len(oids) == 0 {
		return nil, nil
	}
	rows, err := s.cat.conn.Query(ctx, `SELECT c.oid::int8, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY($1::oid[])`, oids)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	defer rows.Close()
	names := map[uint32]string{}
	for rows.Next() {
		var oid int64
		var ns, rel string
		if err := rows.Scan(&oid, &ns, &rel); err != nil {
			return nil, err
		}
		names[uint32(oid)] = model.TableName(ns, rel)
	}
	if err := rows.Err(); err != nil {
		return nil, explain(s.cfg, err)
	}
	out := map[string]renamedTo{}
	for t, st := range s.tables {
		if _, held := s.held[t]; !held && names[st.OID] != "" && names[st.OID] != t {
			out[t] = renamedTo{OID: st.OID, Name: names[st.OID]}
		}
	}
	return out, nil
}

// renamedTo is a relation and its name now.
type renamedTo struct {
	OID  uint32
	Name string
}

// TakeHolds returns the tables held since the last call. The caller
// holds them in the log before it writes the item Next returned.
func (s *Stream) TakeHolds() []Hold {
	h := s.holds
	s.holds = nil
	return h
}

// renamedFrom is the changefeed's table a relation was known as, if the
// relation now has another name. When another relation of the
// changefeed has that name, only a table read here: a name is one
// relation's at a time, so a table that joined later had the relation
// before its rename (the WAL read again from before it, after the name
// came back to the changefeed as a new table), and holding the renamed
// table there held it for good, with a remedy that changed nothing. But
// a table read here took the name of another of the changefeed's (two
// swapped by renames, or one dropped and the other renamed to its name):
// a rename, its rows otherwise dropped as a gone relation's.
func (s *Stream) renamedFrom(id uint32, name string) string {
	if st, ok := s.tables[name]; ok && st.OID != 0 && st.OID != id {
		for t, o := range s.tables {
			if o.OID == id && t != name && !s.unread(o) {
				return t
			}
		}
		return ""
	}
	if r, ok := s.rels[id]; ok && !r.foreign && !r.gone && r.table != name {
		return r.table
	}
	for t, st := range s.tables {
		if st.OID == id && t != name {
			return t
		}
	}
	return ""
}

// renamedToGone says a relation of the changefeed's, under the name of a
// table the changefeed removed, was renamed to that name after the
// removal (renamed back to the name it had before its rename was
// followed): a rename, held like any other, where its rows were dropped
// as the removed table's and the checkpoint went past them. Before the
// removal the name was the removed table's (the relation itself before
// its rename): those rows are dropped.
func (s *Stream) renamedToGone(id uint32, name string) bool {
	at, ok := s.goneAt[name]
	if !ok || s.base <= at {
		return false
	}
	for _, st := range s.tables {
		if st.OID == id {
			return true
		}
	}
	return false
}

// renameHold is why a renamed table is held, and the way on. Renaming it
// back is not one: the reader, reading again from before the hold, meets
// the change written under the new name again.
func renameHold(cf, from, to string) string {
	return fmt.Sprintf("renamed upstream to %s; its changes from then on are held: replicate it under its new name with 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s --add-table %s' (its rows are copied again under the new name), 'cdcctl changefeed resume %s'",
		to, cf, cf, from, to, cf)
}

// holdToCopy holds a table for a change that copying it again undoes
// (reason says how an operator does it). With auto-remedy (and a
// snapshot: with snapshot=never a table added back is empty), where the
// table has a primary key now (what copying it again needs), the
// changefeed does it by itself (model.TableIssue.CopyAgain).
func (s *Stream) holdToCopy(ctx context.Context, rel uint32, table, reason string) error {
	h := Hold{Table: table, Reason: reason}
	var keyed bool
	// (Under its name still: renamed since, the update adding it back
	// would not find it. Once the catalog shows the transaction the
	// change is in, as for a rename: not so, the stream ends and is read
	// again.)
	if err := s.awaitVisible(ctx); err != nil {
		return err
	}
	err := s.cat.conn.QueryRow(ctx, `SELECT to_regclass($2) = $1::int8::oid AND EXISTS (SELECT 1 FROM pg_index WHERE indrelid = $1::int8::oid AND indisprimary)`, int64(rel), quoteQualified(table)).Scan(&keyed)
	if s.cfg.AutoRemedy && s.cfg.Snapshot != "never" && err == nil && keyed {
		h.CopyAgain = true
		h.Reason += "; the changefeed does this by itself within the coordinator's --follow-tables-every (the source URI's auto-remedy=false leaves it held)"
	}
	s.holdAs(h)
	return nil
}

// renameFollowed is why a renamed table is held when the changefeed
// follows it under its new name by itself.
func renameFollowed(cf, from, to string) string {
	return fmt.Sprintf("renamed upstream to %s; the changefeed follows it there by itself within the coordinator's --follow-tables-every, as table rules do: its rows are copied again under the new name and the sink gets the rename under the old one (to do it now: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s --add-table %s', 'cdcctl changefeed resume %s'; the source URI's auto-remedy=false leaves renamed tables held)",
		to, cf, cf, from, to, cf)
}

// missingTables are the changefeed's tables whose relation no longer
// exists upstream (dropped; a rename keeps the relation).
func (s *Stream) missingTables(ctx context.Context) ([]string, error) {
	var oids []uint32
	byOID := map[uint32]string{}
	for t, st := range s.tables {
		if st.OID != 0 {
			oids = append(oids, st.OID)
			byOID[st.OID] = t
		}
	}
	if len(oids) == 0 {
		return nil, nil
	}
	rows, err := s.cat.conn.Query(ctx, `SELECT oid::int8 FROM pg_class WHERE oid = ANY($1::oid[])`, oids)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	defer rows.Close()
	for rows.Next() {
		var oid int64
		if err := rows.Scan(&oid); err != nil {
			return nil, err
		}
		delete(byOID, uint32(oid))
	}
	if err := rows.Err(); err != nil {
		return nil, explain(s.cfg, err)
	}
	var out []string
	for _, t := range byOID {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// fillOIDs looks up the relation of tables whose resume point does not
// know it (written before it was kept) by name; those without one are
// unresolved (the reader holds them).
func (s *Stream) fillOIDs(ctx context.Context) error {
	for t, st := range s.tables {
		if st.OID != 0 {
			continue
		}
		var oid *int64
		if err := s.cat.conn.QueryRow(ctx, `SELECT to_regclass($1)::oid::int8`, quoteQualified(t)).Scan(&oid); err != nil {
			return explain(s.cfg, err)
		}
		if oid != nil {
			st.OID = uint32(*oid)
		} else {
			s.unresolved = append(s.unresolved, t)
		}
	}
	sort.Strings(s.unresolved)
	return nil
}

// issues tracks what the reader reports of its tables, for the
// changefeed's status: held tables, and dropped ones.
type issues struct {
	list []source.TableIssue
}

func (is *issues) add(i source.TableIssue) {
	for _, have := range is.list {
		if have.Table == i.Table && have.State == i.State {
			return
		}
	}
	is.list = append(is.list, i)
	sort.Slice(is.list, func(a, b int) bool { return is.list[a].Table < is.list[b].Table })
}

// droppedEnded is a dropped table's report where the changefeed ends it
// by itself (auto-remedy); copy says a table created again under its
// name is copied in its place (not with snapshot=never).
func droppedEnded(cf, table string, copy bool) string {
	again := "a table created again under its name is not replicated (snapshot=never; add it: 'cdcctl changefeed update " + cf + " --add-table " + table + "' while paused)"
	if copy {
		again = "or, if a table is created again under its name by then, copies the new one in its place"
	}
	return fmt.Sprintf("dropped upstream; every change before the drop is replicated, then the changefeed ends the table by itself (the sink gets DROP TABLE %s), %s; a changefeed's only table stays (remove the changefeed: 'cdcctl changefeed remove %s'); to end it yourself: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed resume %s'",
		table, again, cf, cf, cf, table, cf)
}

// droppedReason is what a dropped table's report says to do.
func droppedReason(cf, table string) string {
	return fmt.Sprintf("dropped upstream; every change before the drop was replicated and nothing more comes: remove it from the changefeed ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s', 'cdcctl changefeed resume %s'); a table created again under this name can then be added back ('cdcctl changefeed update %s --add-table %s': the sink's old rows are truncated, the new table's copied), or, once created again, be copied in the dropped one's place in one update ('cdcctl changefeed update %s --copy-table %s' while paused)", cf, cf, table, cf, cf, table, cf, table)
}

// dropCheckEvery is how often the reader looks for tables dropped
// upstream (pgoutput says nothing of a DROP TABLE) unless the source URI
// says otherwise (catalog-interval=).
const dropCheckEvery = 10 * time.Second

// checkDropped reports the tables dropped upstream (Pull calls it every
// Source.dropEvery).
func (s *Source) checkDropped(ctx context.Context, st *Stream) error {
	missing, err := st.missingTables(ctx)
	if err != nil {
		return err
	}
	renamed, err := st.renamedAway(ctx)
	if err != nil {
		return err
	}
	if len(missing) == 0 && len(renamed) == 0 {
		return nil
	}
	// After every drop or rename found: every change of the tables
	// under their names is before it.
	at, err := dbNow(ctx, st.cat)
	if err != nil {
		return explain(s.cfg, err)
	}
	for _, t := range slices.Sorted(maps.Keys(renamed)) {
		// Held from there, as the stream holds one met under its new
		// name (in the log at the reader's next item).
		h, err := st.renamed(ctx, renamed[t].OID, t, renamed[t].Name)
		if err != nil {
			return err
		}
		h.away = true
		st.holdAt(h, at)
	}
	// Without table rules (which end it themselves) and with
	// auto-remedy, the changefeed ends it by itself.
	end := s.cfg.AutoRemedy && len(s.cfg.Filter) == 0
	for _, t := range missing {
		why := droppedReason(string(s.cf), t)
		if end {
			why = droppedEnded(string(s.cf), t, s.cfg.Snapshot != "never")
		}
		s.report(source.TableIssue{Table: t, State: source.TableDropped, At: at, Since: time.Now().UTC(), Reason: why, End: end, CopyAgain: end && s.cfg.Snapshot != "never"})
	}
	return nil
}

// report records a table's issue for the changefeed's status.
func (s *Source) report(i source.TableIssue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issues.add(i)
}

// TableIssues implements source.IssueReporter.
func (s *Source) TableIssues() []source.TableIssue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.TableIssue(nil), s.issues.list...)
}

// copySteps are the commands that copy a held table again: the remedy
// most holds' reasons end with.
func copySteps(cf, table string) string {
	return fmt.Sprintf("'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s', 'cdcctl changefeed resume %s'", cf, cf, table, cf)
}
