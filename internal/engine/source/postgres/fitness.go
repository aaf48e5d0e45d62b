package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// What a table and a publication must be for a changefeed to replicate
// them, checked when it is created and when tables are added: each says
// why not, with the fix.

// publicationUnfit says why a publication the operator made does not
// serve the changefeed, which copies whole tables and must then see
// every change of every row: one that leaves out updates, deletes or
// truncates (publish=), or filters a table's rows (WHERE) or columns (a
// column list, PostgreSQL 15 and later). The snapshot copied rows whose
// changes never came, and a column list looked like columns dropped.
func publicationUnfit(ctx context.Context, conn *pgx.Conn, cfg Config) (string, error) {
	var ins, upd, del, trunc bool
	var version int
	if err := conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, current_setting('server_version_num')::int FROM pg_publication WHERE pubname = $1`,
		cfg.Publication).Scan(&ins, &upd, &del, &trunc, &version); err != nil {
		return "", err
	}
	if !ins || !upd || !del || !trunc {
		return fmt.Sprintf("publication %s does not publish every change (insert %v, update %v, delete %v, truncate %v): the changefeed would copy rows whose changes never come; ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'), or leave publication= out and the changefeed makes its own",
			cfg.Publication, ins, upd, del, trunc, cfg.Publication), nil
	}
	if version < 150000 {
		return "", nil // no row filters or column lists before PostgreSQL 15
	}
	rows, err := conn.Query(ctx, `
SELECT n.nspname || '.' || c.relname, r.prqual IS NOT NULL, r.prattrs IS NOT NULL
FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.pubname = $1 AND (r.prqual IS NOT NULL OR r.prattrs IS NOT NULL)
ORDER BY 1`, cfg.Publication)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var table string
		var filtered, narrowed bool
		if err := rows.Scan(&table, &filtered, &narrowed); err != nil {
			return "", err
		}
		if !slices.Contains(cfg.Tables, table) {
			continue
		}
		what := "rows (WHERE)"
		if !filtered {
			what = "columns (a column list)"
		}
		return fmt.Sprintf("publication %s publishes only some of table %s's %s: the changefeed copies the whole table and must see every change of it; ALTER PUBLICATION %s SET TABLE … without them, or leave publication= out and the changefeed makes its own",
			cfg.Publication, table, what, cfg.Publication), nil
	}
	return "", rows.Err()
}

// checkTable reads a table's definition and checks that it can be
// replicated: one without a primary key needs REPLICA IDENTITY FULL.
func checkTable(ctx context.Context, cat *catalog, cfg Config, t string) (*source.TableDef, error) {
	def, err := cat.tableDef(ctx, t)
	if err != nil {
		return nil, explain(cfg, err)
	}
	var unlogged string
	var level int
	if err := cat.conn.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname), p.level FROM pg_partition_tree($1::regclass) p
JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relpersistence = 'u' ORDER BY p.level, 1 LIMIT 1`, quoteQualified(t)).Scan(&unlogged, &level); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, explain(cfg, err)
	} else if err == nil {
		return nil, errors.New(unloggedUnfit(t, unlogged, level == 0))
	}
	if len(def.KeyNames()) == 0 {
		// A keyless table is replicated as one partition; its updates
		// and deletes must carry the whole old row to say which row
		// they change (and PostgreSQL refuses them on a published
		// table without a replica identity).
		var ident string
		if err := cat.conn.QueryRow(ctx, `SELECT relreplident::text FROM pg_class WHERE oid = $1::regclass`, quoteQualified(t)).Scan(&ident); err != nil {
			return nil, explain(cfg, err)
		}
		if ident != "f" {
			return nil, fmt.Errorf("table %s has no primary key: add one (ALTER TABLE %s ADD PRIMARY KEY (...)) so it can be split into key ranges, or replicate it as one partition with ALTER TABLE %s REPLICA IDENTITY FULL", t, t, t)
		}
		return def, nil
	}
	if why, err := identityUnfit(ctx, cat, t, def.KeyNames()); err != nil {
		return nil, explain(cfg, err)
	} else if why != "" {
		return nil, errors.New(why)
	}
	return def, nil
}

// unloggedUnfit says why a table with an UNLOGGED partition (or, under
// a publication of all tables, itself UNLOGGED) cannot be replicated:
// PostgreSQL writes none of that relation's rows to the WAL, so their
// changes would never reach the changefeed.
func unloggedUnfit(table, unlogged string, itself bool) string {
	if itself {
		return fmt.Sprintf("table %s is UNLOGGED: PostgreSQL writes none of its rows to the WAL, so their changes would never reach the changefeed; ALTER TABLE %s SET LOGGED", table, unlogged)
	}
	return fmt.Sprintf("partition %s of table %s is UNLOGGED: PostgreSQL writes none of its rows to the WAL, so their changes would never reach the changefeed; ALTER TABLE %s SET LOGGED", unlogged, table, unlogged)
}

// identityUnfit says why a keyed table's replica identity (what its
// UPDATEs and DELETEs carry of the old row) does not serve the changefeed,
// which routes rows by the primary key: an identity index of other
// columns (a DELETE carries only those, and rows were keyed by them,
// against partitions cut on the key), NOTHING (no old key at all), or a
// DEFERRABLE primary key under the default identity, which PostgreSQL
// does not take as one: once published, the table's UPDATEs and DELETEs
// would fail in the application.
func identityUnfit(ctx context.Context, cat *catalog, t string, key []string) (string, error) {
	var ident string
	var deferrable bool
	var index []string
	err := cat.conn.QueryRow(ctx, `
SELECT c.relreplident::text,
  COALESCE((SELECT NOT i.indimmediate FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), false),
  COALESCE((SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(att, ord)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.att
    WHERE i.indrelid = c.oid AND i.indisreplident AND k.ord <= i.indnkeyatts), '{}')
FROM pg_class c WHERE c.oid = $1::regclass`, quoteQualified(t)).Scan(&ident, &deferrable, &index)
	if err != nil {
		return "", err
	}
	switch {
	case ident == "n":
		return fmt.Sprintf("table %s has REPLICA IDENTITY NOTHING: its UPDATEs and DELETEs carry no key of the row they change; ALTER TABLE %s REPLICA IDENTITY DEFAULT", t, t), nil
	case ident == "i" && !slices.Equal(index, key):
		return fmt.Sprintf("table %s's replica identity is an index of (%s), not its primary key (%s): its DELETEs carry only that index's columns, and the changefeed routes rows by the primary key; ALTER TABLE %s REPLICA IDENTITY DEFAULT (or FULL)",
			t, strings.Join(index, ", "), strings.Join(key, ", "), t), nil
	case ident == "d" && deferrable:
		return fmt.Sprintf("table %s's primary key is DEFERRABLE, which PostgreSQL does not take as a replica identity: once published, its UPDATEs and DELETEs would fail in the application; make the key NOT DEFERRABLE, or ALTER TABLE %s REPLICA IDENTITY FULL", t, t), nil
	}
	return "", nil
}
