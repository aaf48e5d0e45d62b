package postgres

// A plain table's inheritance children (CREATE TABLE … INHERITS, ALTER
// TABLE … INHERIT; TimescaleDB's chunks under a hypertable) are read
// with it by a plain FROM, but PostgreSQL's stream sends their rows'
// changes under their own names, never the table's (and a publication of
// the table publishes them as tables of their own). Copied with the
// table, those rows never changed downstream again, and verify compared
// them as the table's. The snapshot, the copies again and verify read the
// table's own rows only, the rows its stream carries; a child is a table
// to replicate by its own name, and changefeed get says so.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// fromTable is how a read of a table's rows names it in FROM: a plain
// table ONLY, its own rows without its inheritance children's; a
// partitioned table as it is (its partitions' rows are its own, and its
// stream sends them under its name).
func fromTable(ctx context.Context, q rowQuerier, table string) (string, error) {
	var plain bool
	if err := q.QueryRow(ctx, `SELECT relkind = 'r' FROM pg_class WHERE oid = $1::regclass`, quoteQualified(table)).Scan(&plain); err != nil {
		return "", err
	}
	return fromName(table, plain), nil
}

// fromName is fromTable of a table known to be plain or not.
func fromName(table string, plain bool) string {
	if plain {
		return "ONLY " + quoteQualified(table)
	}
	return quoteQualified(table)
}

// inheritedWarnings are changefeed get's warnings of the changefeed's
// plain tables that have inheritance children (direct ones, plain
// tables: a foreign table cannot be published) the changefeed does not
// replicate, naming up to five of each.
func inheritedWarnings(ctx context.Context, conn *pgx.Conn, cfg Config) []string {
	quoted := make([]string, len(cfg.Tables))
	replicated := map[string]bool{}
	for i, t := range cfg.Tables {
		quoted[i] = quoteQualified(t)
		replicated[quoted[i]] = true
	}
	rows, err := conn.Query(ctx, `SELECT format('%I.%I', pn.nspname, p.relname), array_agg(format('%I.%I', cn.nspname, c.relname) ORDER BY cn.nspname, c.relname)
FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace
JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
WHERE p.relkind = 'r' AND c.relkind = 'r' AND p.oid IN (SELECT to_regclass(t) FROM unnest($1::text[]) t)
GROUP BY 1 ORDER BY 1`, quoted)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var table string
		var children []string
		if err := rows.Scan(&table, &children); err != nil {
			return out
		}
		var left []string
		for _, c := range children {
			if !replicated[quoteQualified(c)] {
				left = append(left, c)
			}
		}
		if len(left) == 0 {
			continue
		}
		more := ""
		if len(left) > 5 {
			more, left = fmt.Sprintf(" and %d more", len(left)-5), left[:5]
		}
		out = append(out, fmt.Sprintf("table %s has inheritance children (%s%s; CREATE TABLE … INHERITS, or TimescaleDB's chunks): PostgreSQL sends their rows' changes under their own names, so the changefeed replicates %s's own rows only (SELECT … FROM ONLY %s); add the children to replicate theirs (changefeed update --add-table)",
			table, strings.Join(left, ", "), more, table, table))
	}
	return out
}
