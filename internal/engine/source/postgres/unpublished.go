package postgres

import (
	"context"
	"fmt"
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
	copyAgain := fmt.Sprintf("then copy it again: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s', 'cdcctl changefeed resume %s'", cf, cf, table, cf)
	switch {
	case viaChildren:
		return fmt.Sprintf("publication %s publishes its rows under its partitions' names now (publish_via_partition_root off), which the changefeed does not replicate: its changes since are lost; ALTER PUBLICATION %s SET (publish_via_partition_root = true), %s", cfg.Publication, cfg.Publication, copyAgain)
	case partition:
		return "attached as a partition of another table, its rows are published under that table's name: its changes since are lost; detach it (ALTER TABLE … DETACH PARTITION), or replicate the table it belongs to instead"
	}
	return fmt.Sprintf("not in publication %s any more (ALTER PUBLICATION … DROP TABLE, or the publication changed): PostgreSQL sends none of its changes since it left, and they are lost; put it back (ALTER PUBLICATION %s ADD TABLE %s; a publication cdcctl made is given it back by the copy), %s",
		cfg.Publication, cfg.Publication, quoteQualified(table), copyAgain)
}
