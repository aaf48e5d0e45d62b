package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table ATTACHed as a partition of a replicated partitioned table
// brings the rows it already holds, and PostgreSQL writes no WAL record
// of them: the changefeed would get the attached partition's later
// changes but never its earlier rows ("load, then attach"). The puller
// looks for partitions attached since it last looked, every dropEvery,
// and writes a mark of them into the WAL (source.MarkAttached, with its
// table and the partitions' OIDs). Every partition of the table meets
// the mark in its place in the stream and copies the attached
// relation's rows of its key range, between watermarks, as the initial
// snapshot copies (model.CopyProgress.Only), so the copy is consistent
// with the changes around it, goes on after a move, a split or a crash,
// and its rows come under the table's name, as the partition's changes
// do.
//
// What was looked at is kept with the resume point: every relation in
// each table's partition tree (position.Parts, OIDs). A look reads the
// trees; a relation not among them is new, and one of them no longer
// there is forgotten (detached or dropped; attached again later, it is
// new again). The marks carry the new relations, and they join the
// known ones when the stream reads the marks back, so a resume point
// after the marks knows them and one before reads the marks again: a
// puller looks only once its stream has passed where the WAL ended when
// it started, and never while its own marks are on their way. Marks name
// their changefeed's slot: every slot on the database decodes them, and
// a changefeed takes only its own.

// partsKind is the kind of the mark that carries a look's new relations
// back to the puller. It names no table of the log: no partition meets
// it.
const partsKind = "attached-parts"

// attachMark is the content of the marks a look writes: a source.Mark
// for the partitions (Kind MarkAttached, ID the relations to copy) and,
// for the puller, every relation new in the table's tree.
type attachMark struct {
	source.Mark
	Slot string   `json:"slot"`
	New  []uint32 `json:"new,omitempty"`
}

// walEnd is where the WAL ends now (pg_current_wal_lsn): a look waits
// until its stream has read that far.
func walEnd(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	var end string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(end)
}

// partTree is a table's partition tree: every relation in it under the
// table, each with its parent.
type partTree map[uint32]uint32

// readTrees reads the partition trees of tables (by relation): those
// with partitions, each under the changefeed's name of its table. A
// partition being detached is out of its tree already.
func readTrees(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tables map[uint32]string) (map[string]partTree, error) {
	oids := make([]uint32, 0, len(tables))
	for oid := range tables {
		oids = append(oids, oid)
	}
	// By the tables' relations (pg_inherits' index on the parent), not
	// their names: a changefeed of many tables looks in milliseconds, on
	// the stream's own connection. pg_inherits is read in the query's
	// snapshot, not the catalog's.
	rows, err := q.Query(ctx, `WITH RECURSIVE tree(root, rel, parent) AS (
		SELECT i.inhparent, i.inhrelid, i.inhparent FROM pg_inherits i WHERE i.inhparent = ANY($1::oid[]) AND NOT i.inhdetachpending
		UNION ALL
		SELECT t.root, i.inhrelid, i.inhparent FROM tree t JOIN pg_inherits i ON i.inhparent = t.rel AND NOT i.inhdetachpending)
	SELECT t.root::int8, t.rel::int8, t.parent::int8 FROM tree t JOIN pg_class c ON c.oid = t.rel AND c.relispartition`, oids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]partTree{}
	for rows.Next() {
		var root, rel, parent int64
		if err := rows.Scan(&root, &rel, &parent); err != nil {
			return nil, err
		}
		t := tables[uint32(root)]
		if out[t] == nil {
			out[t] = partTree{}
		}
		out[t][uint32(rel)] = uint32(parent)
	}
	return out, rows.Err()
}

// oidsOf are a tree's relations, sorted: as a resume point keeps them.
func (t partTree) oidsOf() []uint32 {
	out := make([]uint32, 0, len(t))
	for oid := range t {
		out = append(out, oid)
	}
	slices.Sort(out)
	return out
}

// newIn are the relations of tree not in known, and of those the ones
// to copy: each whose parent is not new itself (a partition attached
// with partitions of its own is read whole).
func newIn(tree partTree, known []uint32) (all, top []uint32) {
	isNew := map[uint32]bool{}
	for oid := range tree {
		if _, ok := slices.BinarySearch(known, oid); !ok {
			isNew[oid] = true
			all = append(all, oid)
		}
	}
	for _, oid := range all {
		if !isNew[tree[oid]] {
			top = append(top, oid)
		}
	}
	slices.Sort(all)
	slices.Sort(top)
	return all, top
}

// treesOf are the partition trees of tables by name (their relations
// looked up), as a resume point keeps them.
func treesOf(ctx context.Context, cat *catalog, tables []string) (map[string][]uint32, error) {
	byOID := map[uint32]string{}
	for _, t := range tables {
		oid, err := cat.oidOf(ctx, t)
		if err != nil {
			return nil, err
		}
		byOID[oid] = t
	}
	trees, err := readTrees(ctx, cat.conn, byOID)
	if err != nil {
		return nil, err
	}
	out := map[string][]uint32{}
	for t, tree := range trees {
		out[t] = tree.oidsOf()
	}
	return out, nil
}

// markAttached writes, in one transaction, a mark for each table with
// relations new in its tree.
func markAttached(ctx context.Context, conn *pgx.Conn, slot string, marks []attachMark) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit, a no-op
	for _, mk := range marks {
		mk.Slot = slot
		b, _ := json.Marshal(mk)
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b)); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// ownMarks keeps of a transaction's marks the chunks' watermarks and
// this changefeed's attach and copy-again marks (another changefeed's,
// written by its puller on the same database, are not this one's), and returns the
// relations new in each table's tree that this changefeed's marks carry.
func ownMarks(tx *Txn, slot string) map[string][]uint32 {
	var added map[string][]uint32
	kept := tx.Marks[:0]
	for _, m := range tx.Marks {
		var mk attachMark
		if json.Unmarshal(m, &mk) == nil && (mk.Kind == source.MarkAttached || mk.Kind == partsKind || mk.Kind == source.MarkAgain) {
			if mk.Slot != slot {
				continue
			}
			if len(mk.New) > 0 { // a look's (a MarkAgain carries none)
				if added == nil {
					added = map[string][]uint32{}
				}
				added[mk.Table] = append(added[mk.Table], mk.New...)
			}
			if mk.Kind == partsKind {
				continue // the puller's alone
			}
		}
		kept = append(kept, m)
	}
	tx.Marks = kept
	return added
}

// relationRead is what a span's chunk reads: its table, or the relation
// attached to it that the copy reads now (copied.Only, an OID) while it
// is still in the table's partition tree: by its own name where this
// user may read it, through the table otherwise (a grant on the table
// covers its partitions only when read through it). One detached or
// dropped since it was marked reads as empty: its rows are no longer the
// table's.
//
// plain says whether the table is a plain one, as its definition's read
// found it.
func relationRead(ctx context.Context, conn *pgx.Conn, table string, plain bool, def *source.TableDef, copied model.CopyProgress) (string, error) {
	if copied.Only == "" {
		return fromName(table, plain), nil
	}
	oid, err := strconv.ParseUint(copied.Only, 10, 32)
	if err != nil {
		return "", fmt.Errorf("the attached relation to copy is %q, not an OID", copied.Only)
	}
	var name string
	var may, itself bool
	err = conn.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname), has_table_privilege(c.oid, 'SELECT'), c.oid = to_regclass($2) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = $1::int8::oid AND (c.oid = to_regclass($2) OR c.relispartition AND EXISTS (SELECT FROM pg_partition_ancestors(c.oid) a WHERE a.relid = to_regclass($2)))`,
		int64(oid), quoteQualified(table)).Scan(&name, &may, &itself)
	switch {
	case err == pgx.ErrNoRows:
		return fmt.Sprintf("(SELECT %s FROM %s WHERE false) AS detached", columnList(def), quoteQualified(table)), nil
	case err != nil:
		return "", err
	case itself:
		return fromName(table, plain), nil // copied again (again.go)
	case may:
		return name, nil
	}
	return fmt.Sprintf("(SELECT %s FROM %s WHERE tableoid IN (SELECT relid FROM pg_partition_tree(%d::oid::regclass) WHERE isleaf)) AS attached",
		columnList(def), quoteQualified(table), oid), nil
}

// looks is a puller's state of its looks for attached partitions.
type looks struct {
	on    bool                // the stream carries marks (an initial snapshot)
	known map[string][]uint32 // position.Parts as the stream has read it; nil: not read yet
	after pglogrepl.LSN       // the WAL's end when the puller started (0: not read yet)
	at    pglogrepl.LSN       // how far the stream has read
	// pending: marks were written and have not come back through the
	// stream; no look until they have.
	pending bool
}

// newLooks are the looks of a puller that resumes at p.
func newLooks(cfg Config, p position) *looks {
	l := &looks{on: cfg.Snapshot != "never"}
	if p.PartsKnown {
		l.known = p.Parts
		if l.known == nil {
			l.known = map[string][]uint32{}
		}
	}
	return l
}

// read notes how far the stream has read.
func (l *looks) read(lsn pglogrepl.LSN) { l.at = max(l.at, lsn) }

// heard takes the relations this changefeed's marks carried back
// through the stream: this run's, or an earlier run's read again. The
// known trees are a new map: the resume points before share the old.
func (l *looks) heard(added map[string][]uint32) {
	if added == nil {
		return
	}
	l.pending = false
	if l.known == nil {
		return // the first look takes the trees as they are
	}
	next := make(map[string][]uint32, len(l.known)+len(added))
	for t, oids := range l.known {
		next[t] = oids
	}
	for t, oids := range added {
		merged := slices.Concat(next[t], oids)
		slices.Sort(merged)
		next[t] = slices.Compact(merged)
	}
	l.known = next
}

// parts is what a resume point keeps of the looks.
func (l *looks) parts() (map[string][]uint32, bool) { return l.known, l.known != nil }

// lookForAttached marks the partitions attached to the changefeed's
// tables since the last look. It waits until the stream has read past
// where the WAL ended when the puller started (the marks an earlier run
// wrote are read back, not written again) and until the last look's
// marks are read back. A first look without known trees (a resume point
// written before they were kept) takes the trees as they are. A failed
// look is told and made again at the next.
func (s *Source) lookForAttached(ctx context.Context, st *Stream, l *looks) {
	if !l.on || l.pending {
		return
	}
	conn := st.cat.conn
	if l.after == 0 {
		lsn, err := walEnd(ctx, conn)
		if err != nil {
			s.log.Warn("postgres source: cannot look for partitions attached to the changefeed's tables; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
			return
		}
		if l.after = lsn; lsn == 0 {
			return
		}
	}
	if l.at < l.after {
		return
	}
	tables := map[uint32]string{}
	keyless := map[string]bool{}
	for t, ts := range st.Tables() {
		if ts.OID != 0 {
			tables[ts.OID] = t
		}
		if ts.Def != nil && len(ts.Def.KeyNames()) == 0 {
			keyless[t] = true
		}
	}
	trees, err := readTrees(ctx, conn, tables)
	if err != nil {
		s.log.Warn("postgres source: cannot look for partitions attached to the changefeed's tables; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	if l.known == nil {
		l.known = map[string][]uint32{}
		for t, tree := range trees {
			l.known[t] = tree.oidsOf()
		}
		return
	}
	var marks []attachMark
	forget := false
	for t, known := range l.known {
		if len(trees[t]) < len(known) {
			forget = true
		} else {
			for _, oid := range known {
				if _, ok := trees[t][oid]; !ok {
					forget = true
					break
				}
			}
		}
	}
	for t, tree := range trees {
		all, top := newIn(tree, l.known[t])
		if len(all) == 0 {
			continue
		}
		ids := make([]string, len(top))
		for i, oid := range top {
			ids[i] = strconv.FormatUint(uint64(oid), 10)
		}
		if keyless[t] {
			s.log.Warn("postgres source: a partition was attached to a table without a primary key; rows it held are not copied: copy the table again (docs/postgres.md)", "changefeed", s.cf, "table", t, "partitions", strings.Join(ids, " "))
			marks = append(marks, attachMark{Mark: source.Mark{Kind: partsKind, Table: t}, New: all})
			continue
		}
		s.log.Info("postgres source: partitions were attached; their rows are copied", "changefeed", s.cf, "table", t, "relations", strings.Join(ids, " "))
		marks = append(marks, attachMark{Mark: source.Mark{Kind: source.MarkAttached, ID: strings.Join(ids, " "), Table: t}, New: all})
	}
	if forget {
		// Detached or dropped: forgotten now (attached again, new again).
		next := make(map[string][]uint32, len(trees))
		for t := range l.known {
			if tree, ok := trees[t]; ok {
				next[t] = slices.DeleteFunc(slices.Clone(l.known[t]), func(oid uint32) bool { _, ok := tree[oid]; return !ok })
			}
		}
		l.known = next
	}
	if len(marks) == 0 {
		return
	}
	if err := markAttached(ctx, conn, s.cfg.Slot, marks); err != nil {
		s.log.Warn("postgres source: cannot mark the partitions attached to the changefeed's tables; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	l.pending = true
}
