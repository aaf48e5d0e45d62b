package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A column's type changed (ALTER COLUMN … TYPE) can change the value of
// every row of the table: a numeric's scale rounds them, a USING
// expression computes new ones, timestamp to timestamptz writes them
// another way. PostgreSQL rewrites the table and writes no change of
// those rows to the stream, so every row left alone since kept its old
// value downstream. The stream carries the new type only; the catalog
// cannot tell the expression. What it can tell is whether the table was
// rewritten: a relation's file is its own OID until something rewrites
// it (relfilenode), and a type changed without a rewrite (varchar(20) to
// varchar(40) or text, numeric(10,2) to numeric(12,2)) kept every row's
// bytes. So a type changed on a table ever rewritten (this change, or
// an earlier TRUNCATE, VACUUM FULL or CLUSTER, which the catalog cannot
// tell apart) is copied again: the puller writes a mark
// (source.MarkAgain, with where the change was met) into the WAL once it
// has read the change's transaction, and every partition of the table
// meets it in the stream and copies its range again, between
// watermarks, as the initial snapshot does. A copy begun on such a mark
// reads every row as it is then, after the change.

// copyAgain is a table to copy again after a change its transaction made
// (Txn.Again).
type copyAgain struct {
	Table string
	OID   uint32
	At    model.Ts // the change's position
	Why   string   // what the change was, for the log
	// cols are a rewrite mark's columns after its ALTER (rewrites.go),
	// and described says the table's relation message came after the
	// mark in its transaction (TableState.RewriteCols).
	cols      string
	described bool
}

// Why a table is copied again.
const (
	againRetyped   = "a column's type changed and the table was rewritten"
	againAdded     = "a column was added whose value in the older rows PostgreSQL no longer keeps (the table was rewritten since)"
	againRecreated = "a column was dropped and added again under its name (its older rows' values are gone)"
	againRelabeled = "enum values its rows may hold were renamed (ALTER TYPE … RENAME VALUE)"
	againUnclear   = "its columns were renamed, or dropped and others added, in a way the changefeed cannot tell apart at this point of the WAL (the catalog has changed again since); they are taken by their names"
)

// pairByName pairs a relation message's columns with cur's by their
// names alone (-1: added).
func pairByName(cur *source.TableDef, cols []*pglogrepl.RelationMessageColumn) []int {
	pair := make([]int, len(cols))
	for j, c := range cols {
		pair[j] = slices.IndexFunc(cur.Columns, func(k row.ColumnDef) bool { return k.Name == c.Name })
	}
	return pair
}

// A column dropped and added again under its name, as the table's last
// column, leaves the columns pgoutput describes as they were: the same
// names in the same order, with its type the same message. Every older
// row lost its value in it (NULL now, or the new DEFAULT), and the stream
// carries none of them. Only the catalog's attribute numbers tell: the
// column added again took a new one. A relation message whose columns are
// the table's by name is paired without the catalog (pairColumns), so
// the reader asks it once at the transaction's commit for all the tables
// paired so in it (one query, not one per relation message: a reader
// started again meets one for every table it reads), and a table whose
// names now have other numbers is copied again. The catalog is read now,
// not at this point of the stream, so the change may be ahead of it:
// the copy, between watermarks written after the change, reads the rows
// as it left them all the same, and the table's numbers become the
// catalog's now (setNums), against which its next relation message is
// checked: the same change made again later is found too.

// recheck is a table whose relation message was paired by its columns'
// names alone, with the numbers the reader had for them.
type recheck struct {
	table string
	rel   uint32
	names []string
	nums  []int16
	at    model.Ts // the relation message's position, the copy's At
}

// recheckLater asks the catalog about table's columns (def, numbered
// nums) at the transaction's commit.
func (s *Stream) recheckLater(table string, rel uint32, def *source.TableDef, nums []int16, at model.Ts) {
	names := make([]string, len(def.Columns))
	for i, c := range def.Columns {
		names[i] = c.Name
	}
	s.recheck = append(s.recheck, recheck{table: table, rel: rel, names: names, nums: nums, at: at})
}

// recheckColumns copies again the tables of the open transaction's
// rechecks whose columns' names have other numbers in the catalog now.
func (s *Stream) recheckColumns(ctx context.Context) error {
	if len(s.recheck) == 0 {
		return nil
	}
	rels := make([]uint32, len(s.recheck))
	for i, r := range s.recheck {
		rels[i] = r.rel
	}
	attrs, err := s.cat.attributesOf(ctx, rels)
	if err != nil {
		return fmt.Errorf("read the columns of the tables whose schema was sent again: %w", explain(s.cfg, err))
	}
	for _, r := range s.recheck {
		now := numsByName(r.names, attrs[r.rel])
		if now == nil || slices.Equal(now, r.nums) {
			// The same columns; or renamed or dropped since, which the
			// stream tells when it gets there.
			continue
		}
		s.setNums(r.table, now)
		if !slices.ContainsFunc(s.again, func(a copyAgain) bool { return a.Table == r.table }) {
			s.again = append(s.again, copyAgain{Table: r.table, OID: r.rel, At: r.at, Why: againRecreated})
		}
	}
	s.recheck = nil
	return nil
}

// setNums takes a table's columns' numbers as the catalog has them now,
// as of the open transaction's end: a column dropped and added again,
// the numbers the catalog gives its names now are what the table's next
// relation message is checked against (recheckColumns). Taken as not
// known instead, they were read from the catalog at that message
// without a check, so the same change made again before it looked like
// no change. The catalog may be ahead of the stream: a change it has
// made since is then before the copy this one starts (its mark is
// written into the WAL after the catalog was read), which reads the
// rows as it left them.
func (s *Stream) setNums(table string, nums []int16) {
	if _, changed := s.pendingNums[table]; changed {
		s.pendingNums[table] = nums
	} else if st := s.tables[table]; st != nil {
		st.Nums = nums
	}
}

// forgetNums takes a table's columns' numbers as not known, as of the
// open transaction's end.
func (s *Stream) forgetNums(table string) {
	if _, changed := s.pendingNums[table]; changed {
		s.pendingNums[table] = nil
	} else if st := s.tables[table]; st != nil {
		st.Nums = nil
	}
}

// retyped says whether def changes the type of a column of cur (paired
// by pair: def's column i is cur's column pair[i], or new).
func retyped(cur, def *source.TableDef, pair []int) bool {
	for i, c := range def.Columns {
		if i < len(pair) && pair[i] >= 0 && pair[i] < len(cur.Columns) && cur.Columns[pair[i]].Type != c.Type {
			return true
		}
	}
	return false
}

// zoneRetyped says whether a column changed between timestamp and
// timestamptz (or their arrays): every value's text changes (a zone
// added or taken off), and PostgreSQL 12 and later do not rewrite the
// table for it where the ALTER's session is in UTC, so that
// everRewritten may not tell.
func zoneRetyped(cur, def *source.TableDef, pair []int) bool {
	base := func(t string) string {
		t, _, _ = strings.Cut(t, "(")
		return strings.TrimPrefix(t, "_")
	}
	for i, c := range def.Columns {
		if i >= len(pair) || pair[i] < 0 || pair[i] >= len(cur.Columns) {
			continue
		}
		was, is := base(cur.Columns[pair[i]].Type), base(c.Type)
		if was != is && (was == "timestamp" || was == "timestamptz") && (is == "timestamp" || is == "timestamptz") {
			return true
		}
	}
	return false
}

// everRewritten says whether a relation, or a leaf of its partition tree,
// has been rewritten since it was created (its file is not its OID). A
// relation gone since says false: its end comes with the drop, and it
// has nothing to copy.
func everRewritten(ctx context.Context, conn *pgx.Conn, oid uint32) (bool, error) {
	var rewritten bool
	// (pg_partition_tree has no rows for a table not partitioned.)
	err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(c.relfilenode <> c.oid), false) FROM pg_class c
		WHERE c.relkind IN ('r', 'm') AND (c.oid = $1::int8::oid OR c.oid IN (SELECT relid FROM pg_partition_tree($1::int8::oid::regclass)))`, int64(oid)).Scan(&rewritten)
	return rewritten, err
}

// markAgain writes, in one transaction, a mark for each table a
// transaction's type changes rewrote; a table that cannot be copied
// again (no primary key, or snapshot=never) is told instead. An error
// starts the reader again, before the change: it is met and marked again.
func (s *Source) markAgain(ctx context.Context, st *Stream, again []copyAgain) error {
	var marks []attachMark
	for _, a := range again {
		def := st.Tables()[a.Table].Def
		switch {
		case s.cfg.Snapshot == "never":
			s.log.Warn("postgres source: "+a.Why+"; with snapshot=never the rows not changed since keep their old values downstream: copy the table again (docs/postgres.md)", "changefeed", s.cf, "table", a.Table)
		case def != nil && len(def.KeyNames()) == 0:
			s.log.Warn("postgres source: "+a.Why+", in a table without a primary key; the rows not changed since keep their old values downstream: copy the table again (docs/postgres.md)", "changefeed", s.cf, "table", a.Table)
		default:
			s.log.Info("postgres source: "+a.Why+"; the table is copied again", "changefeed", s.cf, "table", a.Table, "at", a.At)
			marks = append(marks, attachMark{Mark: source.Mark{Kind: source.MarkAgain, ID: strconv.FormatUint(uint64(a.OID), 10), Table: a.Table, At: a.At}})
		}
	}
	if len(marks) == 0 {
		return nil
	}
	return markAttached(ctx, st.cat.conn, s.cfg.Slot, marks)
}
