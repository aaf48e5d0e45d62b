package postgres

// Schema changes in the stream: Relation messages whose columns differ,
// and TRUNCATEs (truncate.go), become new table versions, each at its
// own position before the rows written under it.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// relation records a relation's columns; when they differ from the
// table's definition it is a schema change, written before the
// transaction's rows.
func (s *Stream) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	name := model.TableName(m.Namespace, m.RelationName)
	if _, gone := s.gone[name]; gone && !s.renamedToGone(m.RelationID, name) {
		// Removed from the changefeed: its rows still in the WAL are not
		// read (a table renamed upstream and updated under its new name
		// comes under its old name until the rename).
		s.rels[m.RelationID] = &relation{table: name, foreign: true, gone: true}
		return nil
	}
	if from := s.renamedFrom(m.RelationID, name); from != "" {
		s.rels[m.RelationID] = &relation{table: from, held: true}
		return s.holdRenamed(ctx, m.RelationID, from, name)
	}
	if h, held := s.held[name]; held && !h.away {
		s.rels[m.RelationID] = &relation{table: name, held: true}
		return nil
	}
	st, ok := s.tables[name]
	if !ok {
		// Not ours: a partition pgoutput describes before the root it
		// publishes the partition's rows as (publish_via_partition_root),
		// or a table the operator's publication serves to others.
		s.rels[m.RelationID] = &relation{table: name, foreign: true}
		return nil
	}
	if st.OID != 0 && st.OID != m.RelationID {
		// Another relation under the table's name: the one the name had
		// before the table came back (dropped, then created again), or,
		// with a publication of all tables, one created under its name
		// after it was dropped. Its rows are not this table's (mixed in
		// before, on top of the dropped table's rows in the sink).
		s.rels[m.RelationID] = &relation{table: name, foreign: true, gone: true}
		return nil
	}
	s.rels[m.RelationID] = &relation{table: name, cols: m.Columns}
	if st.OID == 0 {
		st.OID = m.RelationID
	}
	if s.unread(st) {
		// Before the table came back or joined: its rows here are not
		// read, and its definition is the one it came with, not this
		// older one.
		return nil
	}
	cur, curNums := st.Def, st.Nums
	// A rewrite mark met since the table was last described copies it
	// again already (rewrites.go): a type change this description shows
	// with the columns that ALTER left is that ALTER's, and needs no
	// second copy. Only that: a column added is not in the mark's copy,
	// which began before the stream knew the column (again below), and
	// another change since has other columns.
	marked := st.RewriteCols
	st.RewriteCols = ""
	for i := range s.again {
		if s.again[i].Table == name && s.again[i].Why == againRewritten {
			marked, s.again[i].described = s.again[i].cols, true
		}
	}
	copiedByMark := marked != "" && marked == describedColumns(m)
	if pending := s.pendingDef(name); pending != nil {
		cur = pending
		if nums, changed := s.pendingNums[name]; changed {
			// (A TRUNCATE, pending too, leaves the columns as they were.)
			curNums = nums
		}
	}
	// What cannot be read about the table holds it (not the changefeed),
	// until the operator has fixed the cause.
	unreadable := func(what string, err error) error {
		if ctx.Err() != nil || s.cat.conn.IsClosed() {
			// The catalog's session ended (the server restarted, an
			// administrator ended it): the stream's failure, not the
			// table's; it is opened again from its resume point.
			return fmt.Errorf("read the catalog for table %s: %w", name, explain(s.cfg, err))
		}
		s.rels[m.RelationID].held = true
		s.hold(name, fmt.Sprintf("%s cannot be read: %v; fix the cause, then 'cdcctl changefeed resume %s --table %s' reads it again from here", what, err, s.changefeed(), name))
		return nil
	}
	// What the catalog says of the table must include this transaction
	// (an ALTER in it): wait until others can see it.
	if err := s.awaitVisible(ctx); err != nil {
		return err
	}
	pair, nums, byNames, err := s.pairColumns(ctx, m.RelationID, cur, curNums, m.Columns)
	if err != nil {
		return unreadable("its columns", err)
	}
	unclear := pair == nil
	if unclear {
		if s.cfg.Snapshot == "never" || len(cur.KeyNames()) == 0 {
			s.rels[m.RelationID].held = true
			s.hold(name, columnsUnclearHold(s.changefeed(), name))
			return nil
		}
		// Which column is which cannot be told: the columns are taken by
		// their names (a rename is then a drop and an add, and the older
		// rows' values in it are wrong downstream) and the table is
		// copied again (again.go), which writes every row as it is.
		pair, nums = pairByName(cur, m.Columns), nil
	}
	def, err := s.defOf(ctx, name, m.RelationID, m.Columns, m.ReplicaIdentity == 'f', cur, pair)
	if err != nil {
		return unreadable("its new columns", err)
	}
	if m.ReplicaIdentity == 'f' && len(def.KeyNames()) > 0 {
		// Under REPLICA IDENTITY FULL the message flags every column, and
		// the key is the previous definition's: a primary key dropped
		// since leaves the columns as they were, and rows that share
		// the old key's values would collapse into one downstream (a
		// DELETE of one removing the other). The catalog tells.
		gone, err := s.keyGone(ctx, m.RelationID, name, def, nums)
		if err != nil {
			return unreadable("its primary key", err)
		}
		if gone {
			// (Replaced by a key of other columns, likewise.)
			s.rels[m.RelationID].held = true
			return s.holdToCopy(ctx, m.RelationID, name, keyDroppedHold(s.changefeed(), name))
		}
	}
	if m.ReplicaIdentity == 'i' && cur != nil && len(cur.KeyNames()) > 0 && !sameNames(def.KeyNames(), cur.KeyNames()) {
		if done, err := s.identityChanged(ctx, m.RelationID, name, def, unreadable); done || err != nil {
			return err
		}
	}
	if byNames {
		s.recheckLater(name, m.RelationID, def, nums, s.againAt(name))
	}
	if source.SameColumns(def, cur) {
		if unclear {
			s.again = append(s.again, copyAgain{Table: name, OID: m.RelationID, At: s.againAt(name), Why: againUnclear})
			s.forgetNums(name)
			return nil
		}
		if nums != nil && !known(curNums, len(cur.Columns)) {
			// Numbers not kept yet (a checkpoint from before they were),
			// read for the columns as they are.
			if _, changed := s.pendingNums[name]; changed {
				s.pendingNums[name] = nums
			} else {
				st.Nums = nums
			}
		}
		return nil
	}
	version := st.Version + 1
	for _, d := range s.ddls {
		if d.Table == name {
			version = d.SchemaVersion + 1
		}
	}
	at, fits := s.slotFor(name)
	if !fits {
		s.rels[m.RelationID].held = true
		return s.holdToCopy(ctx, m.RelationID, name, tooManyChangesHold(s.changefeed(), name))
	}
	var (
		missing map[string]string
		unknown []string
	)
	if !unclear {
		// (A table copied again takes its rows' values from the copy.)
		missing, unknown, err = s.missingValues(ctx, m.RelationID, def, pair, nums)
		if err != nil {
			// Not knowing them is not taking them as NULL.
			return unreadable("the values its older rows have in its added columns", err)
		}
	}
	again := unclear
	if len(unknown) > 0 {
		if s.cfg.Snapshot == "never" || len(def.KeyNames()) == 0 {
			s.rels[m.RelationID].held = true
			s.hold(name, unknownValuesHold(s.changefeed(), name, unknown))
			return nil
		}
		// The older rows' values come from copying the table again
		// (again.go): the change goes on without them.
		again = true
	}
	if again {
		why := againAdded
		if unclear {
			why = againUnclear
		}
		s.again = append(s.again, copyAgain{Table: name, OID: m.RelationID, At: at, Why: why})
	} else if !copiedByMark && retyped(cur, def, pair) {
		// Rewritten with new values the stream does not carry: the
		// table is copied again (again.go).
		rewritten, err := everRewritten(ctx, s.cat.conn, m.RelationID)
		if err != nil {
			return unreadable("whether its rows were rewritten with its new column types", err)
		}
		if rewritten || zoneRetyped(cur, def, pair) {
			s.again = append(s.again, copyAgain{Table: name, OID: m.RelationID, At: at, Why: againRetyped})
		}
	}
	s.ddls = append(s.ddls, source.Event{Kind: source.KindDDL, Table: name, CommitTs: at, TableVersion: at, Def: def, SchemaVersion: version, Statement: describeChange(name, cur, def, pair, missing)})
	s.pendingNums[name] = nums
	return nil
}

// nullable reads whether a new or retyped column may be NULL from the
// catalog (the relation message says only whether it is in the replica
// identity, every column under REPLICA IDENTITY FULL: taken for NOT
// NULL, the storage sink's schema file said every column added to such
// a table was NOT NULL); guess, where the column is gone since.
func (s *Stream) nullable(ctx context.Context, rel uint32, col string, guess bool) (bool, error) {
	var notNull *bool
	err := s.cat.conn.QueryRow(ctx, `SELECT bool_or(attnotnull) FROM pg_attribute WHERE attrelid = $1::int8::oid AND attname = $2 AND NOT attisdropped`, int64(rel), col).Scan(&notNull)
	if err != nil {
		return false, err
	}
	if notNull == nil {
		return guess, nil
	}
	return !*notNull, nil
}

// visibleWait bounds the wait for a transaction the stream delivered to
// become visible: its backend has flushed its commit and only has to say
// so; past this something else is wrong, and the reader starts again.
const visibleWait = time.Minute

// awaitVisible waits until the open transaction is visible to the
// catalog's queries. Commit order is not visibility order (visible.go):
// the walsender decodes a transaction once its commit record is
// flushed, and its backend takes it out of the running ones after that
// (a moment on an idle machine; as long as a synchronous standby takes
// to answer, or a loaded machine to schedule it). Until then the catalog
// shows its tables as they were before it: a column it added "was
// dropped since", and the value older rows have in it was lost.
func (s *Stream) awaitVisible(ctx context.Context) error {
	if !s.open || s.visible == s.xid {
		return nil
	}
	pause := time.Millisecond
	for deadline := time.Now().Add(s.visibleWait); ; {
		var text string
		if err := s.cat.conn.QueryRow(ctx, `SELECT txid_current_snapshot()::text`).Scan(&text); err != nil {
			return fmt.Errorf("wait for transaction %d to be visible: %w", s.xid, explain(s.cfg, err))
		}
		snap, err := parseSnapshot(text)
		if err != nil {
			return err
		}
		if !snap.hides(s.xid) {
			s.visible = s.xid
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("transaction %d is in the WAL but not visible to other sessions after %s (a synchronous standby that does not answer?); reading again", s.xid, s.visibleWait)
		}
		if err := sleep(ctx, pause); err != nil {
			return err
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// unknownValuesHold says why a table is held when the values its older
// rows have in added columns cannot be known, and how to copy it again.
func unknownValuesHold(cf, table string, cols []string) string {
	return fmt.Sprintf("the rows it had before column %s was added have values in it the changefeed cannot know (PostgreSQL rewrote the table since the ADD COLUMN: ALTER COLUMN ... TYPE, VACUUM FULL, CLUSTER, or a volatile DEFAULT), so its changes from here are held rather than written without them: copy the table again with 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s' (the sink truncates it, then its rows are copied), 'cdcctl changefeed resume %s'",
		strings.Join(cols, ", "), cf, cf, table, cf)
}

// sameNames says two lists hold the same names, in any order.
func sameNames(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(n string) bool { return !slices.Contains(b, n) })
}

// keyDroppedHold says why a table whose primary key was dropped is held.
func keyDroppedHold(cf, table string) string {
	return fmt.Sprintf("its primary key was dropped (or replaced by one of other columns) upstream: its rows can no longer be told apart by the key they were replicated by, so its changes from here are held rather than merged by the old key's values: copy it again (%s), by a new primary key if you give it one first, else by its whole rows (REPLICA IDENTITY FULL, one partition)",
		copySteps(cf, table))
}

// tooManyChangesHold says why a table is held when one table's schema
// changes are past the transaction's ddlSlots. It used to stop the
// changefeed, and a transaction already committed cannot be split: the
// reader met it again at every restart.
func tooManyChangesHold(cf, table string) string {
	return fmt.Sprintf("one transaction changed this table's schema more than %d times (its columns between its rows, TRUNCATEs): the first %d are written as schema changes, and the table's changes from there on are held: copy the table again with 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s' (the sink truncates it, then its rows are copied), 'cdcctl changefeed resume %s'",
		ddlSlots, ddlSlots, cf, cf, table, cf)
}

// pendingDef is the definition a schema change earlier in the open
// transaction gave a table, or nil.
func (s *Stream) pendingDef(table string) *source.TableDef {
	if d := s.pendingDDL(table); d != nil {
		return d.Def
	}
	return nil
}

// pendingDDL is the last schema change of a table in the open
// transaction, or nil.
func (s *Stream) pendingDDL(table string) *source.Event {
	var last *source.Event
	for i := range s.ddls {
		if s.ddls[i].Table == table {
			last = &s.ddls[i]
		}
	}
	return last
}

// defOf builds a definition from a Relation message. Nullability and the
// order of a composite key are not in the message: they come from the
// previous definition where the column is the same, else from the
// catalog.
//
// Under REPLICA IDENTITY FULL every column is flagged as part of the
// identity: the primary key is then the previous definition's.
func (s *Stream) defOf(ctx context.Context, table string, rel uint32, cols []*pglogrepl.RelationMessageColumn, full bool, prev *source.TableDef, pair []int) (*source.TableDef, error) {
	schema, name := model.SplitTableName(table)
	def := &source.TableDef{Schema: schema, Name: name}
	var keyCols []int
	for i, c := range cols {
		typ, err := s.cat.typeName(ctx, c.DataType, c.TypeModifier)
		if err != nil {
			return nil, err
		}
		cd := source.ColumnDef{Name: c.Name, Type: typ}
		j := -1 // the column before (renamed, perhaps)
		if prev != nil {
			j = pair[i]
		}
		if j >= 0 && prev.Columns[j].Type == typ {
			cd.Nullable = prev.Columns[j].Nullable
		} else if cd.Nullable, err = s.nullable(ctx, rel, c.Name, full || c.Flags&1 == 0); err != nil {
			return nil, err
		}
		inKey := c.Flags&1 != 0
		if full {
			inKey = j >= 0 && prev.Columns[j].KeyPos > 0
		}
		if inKey {
			keyCols = append(keyCols, i)
		}
		def.Columns = append(def.Columns, cd)
	}
	// Key order: the previous definition's for the same key, else the
	// catalog's (the message is read once its transaction is visible),
	// else column order.
	order := prev
	if !sameKeySet(def, keyCols, prev) {
		if now, err := s.cat.tableDef(ctx, table); err == nil && sameKeySet(def, keyCols, now) {
			order = now
		}
	}
	slices.SortStableFunc(keyCols, func(a, b int) int {
		pa, pb := 0, 0
		if order != nil {
			if j := order.Index(def.Columns[a].Name); j >= 0 {
				pa = order.Columns[j].KeyPos
			}
			if j := order.Index(def.Columns[b].Name); j >= 0 {
				pb = order.Columns[j].KeyPos
			}
		}
		if pa == 0 || pb == 0 {
			return a - b
		}
		return pa - pb
	})
	for pos, i := range keyCols {
		def.Columns[i].KeyPos = pos + 1
	}
	return def, nil
}

// sameKeySet says the key columns keyCols of def are other's key
// columns, in any order.
func sameKeySet(def *source.TableDef, keyCols []int, other *source.TableDef) bool {
	if other == nil || len(other.KeyNames()) != len(keyCols) {
		return false
	}
	for _, i := range keyCols {
		if j := other.Index(def.Columns[i].Name); j < 0 || other.Columns[j].KeyPos == 0 {
			return false
		}
	}
	return true
}

// describeChange writes a schema change as the statements that make it
// (pgoutput carries the new columns, not the statements): the drops, the
// renames (pair says which of from's columns each of to's was), then one
// ALTER TABLE for the rest. Without renames it is one ALTER TABLE.
func describeChange(table string, from, to *source.TableDef, pair []int, defaults map[string]string) string {
	var rs [][2]string
	was := make([]bool, len(from.Columns))
	for j, i := range pair {
		if i >= 0 {
			was[i] = true
			if from.Columns[i].Name != to.Columns[j].Name {
				rs = append(rs, [2]string{from.Columns[i].Name, to.Columns[j].Name})
			}
		}
	}
	var drops, rest []string
	for i, c := range from.Columns {
		if !was[i] {
			drops = append(drops, "DROP COLUMN "+quoteIdent(c.Name))
		}
	}
	for j, c := range to.Columns {
		i := pair[j]
		switch {
		case i < 0:
			add := fmt.Sprintf("ADD COLUMN %s %s", quoteIdent(c.Name), c.Type)
			if v, ok := defaults[c.Name]; ok {
				add += " DEFAULT " + quoteLiteral(v)
			}
			rest = append(rest, add)
		case from.Columns[i].Type != c.Type:
			rest = append(rest, fmt.Sprintf("ALTER COLUMN %s TYPE %s", quoteIdent(c.Name), c.Type))
		}
	}
	alter := func(parts []string) string {
		return fmt.Sprintf("ALTER TABLE %s %s", quoteQualified(table), strings.Join(parts, ", "))
	}
	if len(rs) == 0 {
		parts := append(drops, rest...)
		if len(parts) == 0 {
			parts = append(parts, "-- primary key changed")
		}
		return alter(parts)
	}
	var stmts []string
	if len(drops) > 0 {
		stmts = append(stmts, alter(drops))
	}
	taken := func(n string) bool { return from.Index(n) >= 0 || to.Index(n) >= 0 }
	stmts = append(stmts, renameStatements(table, renames(rs, taken))...)
	if len(rest) > 0 {
		stmts = append(stmts, alter(rest))
	}
	return joinStatements(stmts)
}

// resetTables begins the open transaction with a TRUNCATE of each table
// that came back to the changefeed (ResetAt) before it: the first
// transaction after that position, whatever it holds, so that the
// TRUNCATE's position is the same however often the WAL is read again.
// The sink then forgets the rows it had of the table, and its snapshot
// and changes from then on rebuild it.
func (s *Stream) resetTables() {
	var due []string
	for t := range s.resets {
		if st := s.tables[t]; st == nil {
			delete(s.resets, t)
		} else if s.base > st.ResetAt {
			due = append(due, t)
		}
	}
	slices.Sort(due)
	for _, t := range due {
		delete(s.resets, t)
		st := s.tables[t]
		at := s.base // each table's first change (slots.go)
		s.ddls = append(s.ddls, source.Event{Kind: source.KindDDL, Table: t, CommitTs: at, TableVersion: at, Def: st.Def, SchemaVersion: st.Version + 1,
			Statement: source.TruncatePrefix + quoteQualified(t)})
	}
}
