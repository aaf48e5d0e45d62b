package postgres

import (
	"context"
	"fmt"
	"slices"
)

// A table taken out of the publication (ALTER PUBLICATION … DROP
// TABLE, a publication of the operator's changed, publish_via_partition_
// root turned off for a partitioned one) has PostgreSQL send none of
// its changes, and nothing in the stream says so: its checkpoint went on
// and its changes were lost, also after it was put back, and only
// 'changefeed get' said so while it was out. The reader looks at the
// publication at each look for dropped tables (catalog-interval) and
// holds such a table: the changes since it left are lost, and it must be
// put back and copied again. A removal shorter than a look goes unseen.

// checkUnpublished holds the changefeed's tables the publication no
// longer publishes, after checkDropped (a table dropped or renamed away
// is its). Nothing when the publication is gone: the stream says so.
func (s *Source) checkUnpublished(ctx context.Context, st *Stream) error {
	conn := st.cat.conn
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, s.cfg.Publication).Scan(&exists); err != nil {
		return explain(s.cfg, err)
	}
	if !exists {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT c.oid::int8 FROM pg_publication_tables p JOIN pg_namespace n ON n.nspname = p.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename WHERE p.pubname = $1`, s.cfg.Publication)
	if err != nil {
		return explain(s.cfg, err)
	}
	published := map[uint32]bool{}
	for rows.Next() {
		var oid int64
		if err := rows.Scan(&oid); err != nil {
			rows.Close()
			return explain(s.cfg, err)
		}
		published[uint32(oid)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return explain(s.cfg, err)
	}
	var out []string
	for name, ts := range st.tables {
		_, held := st.held[name]
		_, gone := st.gone[name]
		if ts.OID == 0 || ts.Def == nil || held || gone || st.unread(ts) || published[ts.OID] {
			continue
		}
		var still bool // dropped: checkDropped's
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = $1)`, int64(ts.OID)).Scan(&still); err != nil {
			return explain(s.cfg, err)
		}
		if still {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil
	}
	at, err := dbNow(ctx, st.cat)
	if err != nil {
		return explain(s.cfg, err)
	}
	for _, t := range slices.Sorted(slices.Values(out)) {
		st.holdAt(Hold{Table: t, Reason: unpublishedReason(s.cfg, string(s.cf), t)}, at)
	}
	return nil
}

// unpublishedReason says why a table out of the publication is held,
// and what to do.
func unpublishedReason(cfg Config, cf, table string) string {
	return fmt.Sprintf("not in publication %s any more (ALTER PUBLICATION … DROP TABLE, or the publication changed): PostgreSQL sends none of its changes since it left, and they are lost; put it back (ALTER PUBLICATION %s ADD TABLE %s), then copy it again: 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s', 'cdcctl changefeed resume %s'",
		cfg.Publication, cfg.Publication, quoteQualified(table), cf, cf, table, cf)
}
