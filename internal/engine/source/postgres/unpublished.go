package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A table taken out of the publication (ALTER PUBLICATION … DROP
// TABLE, a publication of the operator's changed, publish_via_partition_
// root turned off for a partitioned one) has PostgreSQL send none of
// its changes, and nothing in the stream says so: its checkpoint went on
// and its changes were lost, also after it was put back, and only
// 'changefeed get' said so while it was out. The reader looks at the
// publication at each look for dropped tables (catalog-interval) and
// holds such a table: the changes since it left are lost, and it must be
// put back and copied again. Where the changefeed has its event
// triggers, the stream holds such a table at the ALTER PUBLICATION
// itself (publicationmarks.go); without them, a removal shorter than a
// look goes unseen, and so does one a reader started again after (a
// run's holds are its own).

// checkUnpublished holds the changefeed's tables the publication no
// longer publishes, after checkDropped (a table dropped or renamed away
// is its). A publication gone fails the reader (publicationGone): the
// stream says so on PostgreSQL 13 to 17, in the server's language; 18
// warns and goes on without it. A look that cannot be made is told and
// made again at the next.
func (s *Source) checkUnpublished(ctx context.Context, st *Stream) error {
	conn := st.cat.conn
	var exists, viaRoot bool
	err := conn.QueryRow(ctx, `SELECT count(*) > 0, COALESCE(bool_or(pubviaroot), false) FROM pg_publication WHERE pubname = $1`, s.cfg.Publication).Scan(&exists, &viaRoot)
	if err != nil {
		s.log.Warn("postgres source: cannot look at the publication; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return nil
	}
	if !exists {
		return fmt.Errorf("%s (%w)", publicationGone(s.cfg, "42704", "publication \""+s.cfg.Publication+"\" does not exist", ""), source.ErrUnresumable)
	}
	var oids []int64
	names := map[int64]string{}
	for name, ts := range st.tables {
		_, held := st.held[name]
		_, gone := st.gone[name]
		if ts.OID != 0 && ts.Def != nil && !held && !gone && !st.unread(ts) {
			oids = append(oids, int64(ts.OID))
			names[int64(ts.OID)] = name
		}
	}
	if len(oids) == 0 {
		return nil
	}
	if err := s.checkUnlogged(ctx, st, oids, names); err != nil {
		s.log.Warn("postgres source: cannot look for UNLOGGED partitions; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
	}
	// Those of them that exist and the publication does not publish, with
	// what they are now: a partitioned table, a partition.
	rows, err := conn.Query(ctx, `SELECT c.oid::int8, c.relkind = 'p', c.relispartition FROM pg_class c
WHERE c.oid = ANY($1::oid[]) AND NOT EXISTS (SELECT 1 FROM pg_publication_tables p JOIN pg_namespace n ON n.nspname = p.schemaname
  WHERE p.pubname = $2 AND n.oid = c.relnamespace AND p.tablename = c.relname)`, oids, s.cfg.Publication)
	if err != nil {
		s.log.Warn("postgres source: cannot look at the publication; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return nil
	}
	type out struct {
		table               string
		partitioned, inRoot bool
	}
	var missing []out
	for rows.Next() {
		var oid int64
		var o out
		if err := rows.Scan(&oid, &o.partitioned, &o.inRoot); err != nil {
			rows.Close()
			s.log.Warn("postgres source: cannot look at the publication; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
			return nil
		}
		o.table = names[oid]
		missing = append(missing, o)
	}
	rows.Close()
	if rows.Err() != nil || len(missing) == 0 {
		return nil
	}
	at, err := dbNow(ctx, st.cat)
	if err != nil {
		s.log.Warn("postgres source: cannot look at the publication; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return nil
	}
	slices.SortFunc(missing, func(a, b out) int { return strings.Compare(a.table, b.table) })
	for _, m := range missing {
		st.holdAt(Hold{Table: m.table, Reason: unpublishedReason(s.cfg, string(s.cf), m.table, m.partitioned && !viaRoot, m.inRoot)}, at)
	}
	return nil
}

// unpublishedReason says why a table out of the publication is held,
// and what to do: a partitioned table whose publication publishes its
// partitions' rows instead (publish_via_partition_root off), a table
// attached as a partition of a published one (its rows go under that
// table's name), or one taken out.
func unpublishedReason(cfg Config, cf, table string, viaChildren, partition bool) string {
	copyAgain := "then copy it again: " + copySteps(cf, table)
	switch {
	case viaChildren:
		return fmt.Sprintf("publication %s publishes its rows under its partitions' names now (publish_via_partition_root off), which the changefeed does not replicate: its changes since are lost; ALTER PUBLICATION %s SET (publish_via_partition_root = true), %s", cfg.Publication, cfg.Publication, copyAgain)
	case partition:
		return fmt.Sprintf("a partition of another table, its rows are published under that table's name (it was attached, or publication %s's publish_via_partition_root was turned on): its changes since are lost; detach it (ALTER TABLE … DETACH PARTITION) or ALTER PUBLICATION %s SET (publish_via_partition_root = false), %s; or replicate the table it belongs to instead",
			cfg.Publication, cfg.Publication, copyAgain)
	}
	return fmt.Sprintf("not in publication %s any more (ALTER PUBLICATION … DROP TABLE, or the publication changed): PostgreSQL sends none of its changes since it left, and they are lost; put it back (ALTER PUBLICATION %s ADD TABLE ONLY %s; a publication cdcctl made is given it back by the copy), %s",
		cfg.Publication, cfg.Publication, quoteQualified(table), copyAgain)
}

// An UNLOGGED relation's rows never reach the WAL: a partition of a
// replicated table made UNLOGGED (ALTER TABLE … SET UNLOGGED, created
// UNLOGGED … PARTITION OF it, or attached so; a table itself, under a
// publication of all tables) loses every change of its rows from then
// on, and PostgreSQL says nothing. A changefeed refuses such a table
// (checkTable); one that becomes so is held: by the look, and where the
// changefeed has its event triggers, at the SET UNLOGGED itself (its
// table_rewrite mark, unloggedKind).

// unloggedKind is the kind of the mark of a relation SET UNLOGGED.
const unloggedKind = "unlogged"

// checkUnlogged holds the tables (oids, named by names) that have an
// UNLOGGED relation in their partition tree.
func (s *Source) checkUnlogged(ctx context.Context, st *Stream, oids []int64, names map[int64]string) error {
	rows, err := st.cat.conn.Query(ctx, `SELECT t.oid::int8, format('%I.%I', n.nspname, c.relname), p.level = 0 FROM unnest($1::oid[]) AS t(oid)
CROSS JOIN LATERAL pg_partition_tree(t.oid::regclass) p JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relpersistence = 'u' ORDER BY 1, p.level, 2`, oids)
	if err != nil {
		return err
	}
	type unlogged struct {
		rel    string
		itself bool
	}
	found := map[string]unlogged{}
	for rows.Next() {
		var oid int64
		var u unlogged
		if err := rows.Scan(&oid, &u.rel, &u.itself); err != nil {
			rows.Close()
			return err
		}
		if _, ok := found[names[oid]]; !ok {
			found[names[oid]] = u
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(found) == 0 {
		return err
	}
	at, err := dbNow(ctx, st.cat)
	if err != nil {
		return err
	}
	for _, table := range slices.Sorted(maps.Keys(found)) {
		st.holdAt(Hold{Table: table, Reason: unloggedReason(s.cfg, string(s.cf), table, found[table].rel, found[table].itself)}, at)
	}
	return nil
}

// unloggedMark is what the triggers' function writes of a relation SET
// UNLOGGED: the changefeed's slot, its name, and it with its partitioned
// ancestors.
type unloggedMark struct {
	markHead
	Rel  uint32   `json:"rel"`
	Name string   `json:"name"`
	Rels []uint32 `json:"rels"`
}

// unloggedMarked takes a mark of a relation SET UNLOGGED met in the open
// transaction, holding there the changefeed's tables it is or is a
// partition of; it says whether content was one.
func (s *Stream) unloggedMarked(content []byte) bool {
	var m unloggedMark
	if ok, mine := s.readMark(content, unloggedKind, &m); !ok || !mine {
		return ok // not one; or another changefeed's, on the same database
	}
	var names []string
	for name, st := range s.tables {
		_, held := s.held[name]
		_, gone := s.gone[name]
		if st.OID != 0 && slices.Contains(m.Rels, st.OID) && !held && !gone && !s.unread(st) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		s.hold(name, unloggedReason(s.cfg, s.changefeed(), name, m.Name, s.tables[name].OID == m.Rel))
	}
	return true
}

// unloggedReason says why a table with an UNLOGGED relation is held, and
// what to do.
func unloggedReason(cfg Config, cf, table, unlogged string, itself bool) string {
	what := "partition " + unlogged + " of it is"
	if itself {
		what = "it is"
	}
	return fmt.Sprintf("%s UNLOGGED (ALTER TABLE … SET UNLOGGED, or created or attached so): PostgreSQL writes none of its rows to the WAL, so their changes since never came and are lost; ALTER TABLE %s SET LOGGED, then copy it again: %s",
		what, unlogged, copySteps(cf, table))
}
