package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

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
// and writes a mark of each into the WAL (source.MarkAttached, with its
// table and the partition's OID). Every partition of the table meets the
// mark in its place in the stream and copies the attached relation's
// rows of its key range, between watermarks, as the initial snapshot
// copies (model.CopyProgress.Only), so the copy is consistent with the
// changes around it, goes on after a move, a split or a crash, and its
// rows come under the table's name, as the partition's changes do.
//
// What was looked at is a transaction id: every partition attached by a
// transaction below position.Attached (a full, 64-bit id) is in the
// initial snapshot or was marked. A look reads, in one snapshot, the
// partition trees' pg_inherits rows and the oldest transaction still
// running (below): those attached by a transaction in [Attached, below)
// are new; one at or above below is left for the next look. The marks
// and the new horizon are written in one transaction, and the horizon
// moves only when the stream reads it back: a puller that restarts from
// before it reads the marks again, not new ones, since it looks only
// once its stream has passed the WAL's end at its start.

// horizonKind is the kind of the mark that carries a look's horizon
// (Mark.ID) back through the stream. It names no table: no partition
// meets it.
const horizonKind = "attached-below"

// attachHorizon is the oldest transaction still running (its full id):
// every transaction below it has ended.
func attachHorizon(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var below int64
	err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8`).Scan(&below)
	return uint64(below), err
}

// attachedRel is a partition attached to a replicated table since the
// last look.
type attachedRel struct {
	table string // the replicated table (its root)
	oid   uint32
	name  string // its name now, for the log
}

// attachedSince returns the relations attached anywhere in the partition
// trees of tables by transactions in [from, below), and below, the oldest
// transaction running in the snapshot they were read in. A partition
// attached with partitions of its own is one relation (reading it reads
// them); one being detached is none.
func attachedSince(ctx context.Context, conn *pgx.Conn, tables map[uint32]string, from uint64) ([]attachedRel, uint64, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read only
	var below, next int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8, pg_snapshot_xmax(pg_current_snapshot())::text::int8`).Scan(&below, &next); err != nil {
		return nil, 0, err
	}
	// By the tables' relations (pg_inherits' index on the parent), not
	// their names: a changefeed of many tables looks in a few
	// milliseconds, on the stream's own connection.
	oids := make([]uint32, 0, len(tables))
	for oid := range tables {
		oids = append(oids, oid)
	}
	rows, err := tx.Query(ctx, `WITH RECURSIVE tree(root, rel, parent, x) AS (
		SELECT i.inhparent, i.inhrelid, i.inhparent, i.xmin
		FROM pg_inherits i WHERE i.inhparent = ANY($1::oid[]) AND NOT i.inhdetachpending
		UNION ALL
		SELECT t.root, i.inhrelid, i.inhparent, i.xmin FROM tree t JOIN pg_inherits i ON i.inhparent = t.rel AND NOT i.inhdetachpending)
	SELECT t.root::int8, t.rel::int8, t.parent::int8, t.x::text::int8, format('%I.%I', n.nspname, c.relname)
	FROM tree t JOIN pg_class c ON c.oid = t.rel AND c.relispartition JOIN pg_namespace n ON n.oid = c.relnamespace`, oids)
	if err != nil {
		return nil, 0, err
	}
	type node struct {
		attachedRel
		parent uint32
	}
	var fresh []node
	isNew := map[uint32]bool{}
	for rows.Next() {
		var n node
		var root, rel, parent, x int64
		if err := rows.Scan(&root, &rel, &parent, &x, &n.name); err != nil {
			rows.Close()
			return nil, 0, err
		}
		n.table = tables[uint32(root)]
		if full := fullXid(uint64(next), uint32(x)); full >= from && full < uint64(below) {
			n.oid, n.parent = uint32(rel), uint32(parent)
			fresh = append(fresh, n)
			isNew[n.oid] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var out []attachedRel
	for _, n := range fresh {
		if !isNew[n.parent] {
			out = append(out, n.attachedRel)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].oid < out[j].oid })
	return out, uint64(below), nil
}

// fullXid is the full id of a transaction x (32 bits, as xmin shows it)
// that began before next (the snapshot's xmax, full): the one within 2^32
// below next. The bootstrap and frozen ids (below 3) are 0, before every
// horizon.
func fullXid(next uint64, x uint32) uint64 {
	if x < 3 {
		return 0
	}
	back := uint64(uint32(next) - x)
	if back > next {
		return 0
	}
	return next - back
}

// markAttached writes, in one transaction, a mark for each relation
// attached and the horizon below which every attachment is marked.
func markAttached(ctx context.Context, conn *pgx.Conn, rels []attachedRel, below uint64) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit, a no-op
	// One mark for each table: the log keeps one mark of a table at a
	// position.
	var marks []source.Mark
	byTable := map[string]int{}
	for _, r := range rels {
		oid := strconv.FormatUint(uint64(r.oid), 10)
		if i, ok := byTable[r.table]; ok {
			marks[i].ID += " " + oid
			continue
		}
		byTable[r.table] = len(marks)
		marks = append(marks, source.Mark{Kind: source.MarkAttached, ID: oid, Table: r.table})
	}
	marks = append(marks, source.Mark{Kind: horizonKind, ID: strconv.FormatUint(below, 10)})
	for _, mk := range marks {
		b, _ := json.Marshal(mk)
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b)); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// horizonOf is the horizon a transaction's marks carry back (0: none).
func horizonOf(tx *Txn) uint64 {
	for _, m := range tx.Marks {
		var mk source.Mark
		if json.Unmarshal(m, &mk) == nil && mk.Kind == horizonKind {
			if v, err := strconv.ParseUint(mk.ID, 10, 64); err == nil {
				return v
			}
		}
	}
	return 0
}

// relationRead is what a span's chunk reads: its table, or the relation
// attached to it that the copy reads now (copied.Only, an OID) while it
// is still a partition in the table's tree. One detached or dropped
// since it was marked reads as empty: its rows are no longer the
// table's.
func relationRead(ctx context.Context, conn *pgx.Conn, table string, copied model.CopyProgress) (string, error) {
	if copied.Only == "" {
		return quoteQualified(table), nil
	}
	oid, err := strconv.ParseUint(copied.Only, 10, 32)
	if err != nil {
		return "", fmt.Errorf("the attached relation to copy is %q, not an OID", copied.Only)
	}
	var name string
	err = conn.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = $1::int8::oid AND c.relispartition AND EXISTS (SELECT FROM pg_partition_ancestors(c.oid) a WHERE a.relid = to_regclass($2))`,
		int64(oid), quoteQualified(table)).Scan(&name)
	if err == pgx.ErrNoRows {
		return fmt.Sprintf("(SELECT * FROM %s WHERE false) AS detached", quoteQualified(table)), nil
	}
	return name, err
}

// looks is a puller's state of its looks for attached partitions.
type looks struct {
	on    bool          // the stream carries marks (an initial snapshot)
	below uint64        // position.Attached as the stream has read it
	after pglogrepl.LSN // the WAL's end when the puller started
	at    pglogrepl.LSN // how far the stream has read
	// pending: marks were written with horizon pendingBelow, which has
	// not come back through the stream; no look until it has.
	pending      bool
	pendingBelow uint64
}

// read notes how far the stream has read.
func (l *looks) read(lsn pglogrepl.LSN) { l.at = max(l.at, lsn) }

// heard takes a horizon that came back through the stream: this run's
// marks', or an earlier run's read again.
func (l *looks) heard(below uint64) {
	l.below = max(l.below, below)
	if l.pending && below >= l.pendingBelow {
		l.pending = false
	}
}

// startLooks readies the looks of a puller that resumes at a point with
// horizon below. A point written before the horizon was kept starts at
// the oldest transaction running now: the partitions attached while such
// a changefeed was stopped are not looked for. Where the server cannot
// say (it is a standby), no look is made, and the changefeed goes on.
func (s *Source) startLooks(ctx context.Context, st *Stream, below uint64) *looks {
	l := &looks{on: s.cfg.Snapshot != "never", below: below}
	if !l.on {
		return l
	}
	var end string
	err := st.cat.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end)
	if err == nil {
		l.after, err = pglogrepl.ParseLSN(end)
	}
	if err == nil && l.below == 0 {
		l.below, err = attachHorizon(ctx, st.cat.conn)
	}
	if err != nil {
		l.on = false
		s.log.Warn("postgres source: cannot look for partitions attached to the changefeed's tables; the rows a partition holds when it is attached will not be copied", "changefeed", s.cf, "err", explain(s.cfg, err))
	}
	return l
}

// lookForAttached marks the partitions attached to the changefeed's
// tables since the last look. It waits until the stream has read past
// where the WAL ended when the puller started (the marks an earlier run
// wrote are read back, not written again) and until the last look's
// marks are read back. A failed look is told and made again at the next.
func (s *Source) lookForAttached(ctx context.Context, st *Stream, l *looks) {
	if !l.on || l.pending || l.at < l.after {
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
	rels, below, err := attachedSince(ctx, st.cat.conn, tables, l.below)
	if err == nil && len(rels) > 0 {
		var marked []attachedRel
		for _, r := range rels {
			if keyless[r.table] {
				s.log.Warn("postgres source: a partition was attached with rows to a table without a primary key; its earlier rows are not copied: copy the table again (docs/postgres.md)", "changefeed", s.cf, "table", r.table, "partition", r.name)
				continue
			}
			marked = append(marked, r)
			s.log.Info("postgres source: a partition was attached; its rows are copied", "changefeed", s.cf, "table", r.table, "partition", r.name)
		}
		if err = markAttached(ctx, st.cat.conn, marked, below); err == nil {
			l.pending, l.pendingBelow = true, below
			return
		}
	}
	if err != nil {
		s.log.Warn("postgres source: cannot look for partitions attached to the changefeed's tables; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	l.below = max(l.below, below)
}
