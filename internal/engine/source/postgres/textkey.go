package postgres

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A key of text is routed by the bytes of its text. Where the column's
// collation orders text so too ("C" or "POSIX", PostgreSQL 17's builtin
// C and C.UTF-8, in a UTF-8 database: by the bytes, or by code point,
// which in UTF-8 is the same), its primary key's index gives that order,
// and a chunk is a range read of the index, like an integer key's. In
// another collation (a database's en_US.UTF-8, ICU's) the primary key's
// index is not in the bytes' order; an index the operator adds in a
// bytewise collation (`CREATE INDEX ON t (id COLLATE "C")`) is, and a
// chunk that names that collation is read from it. Without one, a chunk
// is read in the bytes' order by sorting (COLLATE "C"): every chunk
// sorts the rest of its partition's range, and the copy warns
// (TestATextKeyedTableIsCopiedFromItsIndex).
//
// The comparison must be in the index's own collation for the planner
// to use it: COLLATE "C" on a column of the database's default
// collation is another collation to it, even where the default is C.

// byteOrder maps a table's key columns of text to how a chunk names them
// so that an index gives them in the order of their bytes: "" as they
// are (their own collation is bytewise), or a COLLATE clause (an index's
// collation). A column not in it is sorted.
type byteOrder map[string]string

// has says a column of the key is ordered by an index.
func (o byteOrder) has(k string) bool {
	_, ok := o[k]
	return ok
}

// bytewise is the SQL condition that collation co (a row of
// pg_collation, or the database's default: d, pg_database) orders text
// by its bytes, for a server of version.
func bytewise(version int) string {
	own := `co.collprovider = 'c' AND co.collcollate IN ('C', 'POSIX')`
	byDefault := `d.datcollate IN ('C', 'POSIX')`
	if version >= 150000 {
		byDefault = `d.datlocprovider = 'c' AND d.datcollate IN ('C', 'POSIX')`
	}
	if version >= 170000 {
		own = `(` + own + `) OR (co.collprovider = 'b' AND co.colllocale IN ('C', 'C.UTF-8'))`
		byDefault = `(` + byDefault + `) OR (d.datlocprovider = 'b' AND d.datlocale IN ('C', 'C.UTF-8'))`
	}
	return `current_setting('server_encoding') = 'UTF8' AND CASE WHEN co.collprovider = 'd' THEN ` + byDefault + ` ELSE ` + own + ` END`
}

// byteOrder says how the key columns of text (text, varchar) of table
// (schema.name) are ordered by their bytes: by their own collation, or
// else by an index that orders every column of the key so.
func (c *catalog) byteOrder(ctx context.Context, table string, def *source.TableDef) (byteOrder, error) {
	var names []string
	for _, k := range def.KeyNames() {
		if textColumn(def.Columns[def.Index(k)]) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	version, err := c.serverVersion(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, `
SELECT a.attname FROM pg_attribute a
JOIN pg_collation co ON co.oid = a.attcollation
JOIN pg_database d ON d.datname = current_database()
WHERE a.attrelid = $1::regclass AND a.attname = ANY($2) AND `+bytewise(version), quoteQualified(table), names)
	if err != nil {
		return nil, err
	}
	own, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := byteOrder{}
	for _, n := range own {
		out[n] = ""
	}
	if len(out) == len(names) || !indexable(def) {
		return out, nil
	}
	byIndex, err := c.indexByteOrder(ctx, table, def, version)
	if err != nil || byIndex == nil {
		return out, err
	}
	return byIndex, nil
}

// indexByteOrder finds a btree index of table whose first columns are
// its key's, in order and in one direction, each text column in a
// bytewise collation with its type's default operators, and returns how
// a chunk names them; nil if there is none. A partial index, or one not yet valid (a CREATE
// INDEX CONCURRENTLY under way), does not count.
func (c *catalog) indexByteOrder(ctx context.Context, table string, def *source.TableDef, version int) (byteOrder, error) {
	keys := def.KeyNames()
	rows, err := c.conn.Query(ctx, `
SELECT i.indexrelid::int8, a.attname::text, i.indoption[p.pos]::int4,
       oc.opcfamily IN (SELECT d.opcfamily FROM pg_opclass d WHERE d.opcmethod = am.oid AND d.opcdefault AND d.opcintype IN (a.atttypid, 'text'::regtype)),
       a.attcollation = i.indcollation[p.pos],
       COALESCE(quote_ident(n.nspname) || '.' || quote_ident(co.collname), ''), COALESCE(`+bytewise(version)+`, false)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
CROSS JOIN generate_series(0, $2 - 1) p(pos)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[p.pos]
JOIN pg_opclass oc ON oc.oid = i.indclass[p.pos]
LEFT JOIN pg_collation co ON co.oid = i.indcollation[p.pos]
LEFT JOIN pg_namespace n ON n.oid = co.collnamespace
JOIN pg_database d ON d.datname = current_database()
WHERE i.indrelid = $1::regclass AND i.indisvalid AND i.indisready AND i.indpred IS NULL AND i.indnkeyatts >= $2
ORDER BY i.indisprimary DESC, i.indexrelid, p.pos`, quoteQualified(table), len(keys))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		index     int64 = -1
		order     byteOrder
		serves    bool
		pos       int
		direction int32
	)
	for rows.Next() {
		var (
			id                         int64
			name, collation            string
			option                     int32
			defaultClass, own, byBytes bool
		)
		if err := rows.Scan(&id, &name, &option, &defaultClass, &own, &collation, &byBytes); err != nil {
			return nil, err
		}
		if id != index {
			if serves && pos == len(keys) {
				return order, nil
			}
			index, order, serves, pos, direction = id, byteOrder{}, true, 0, option
		}
		if !serves {
			continue
		}
		col := def.Columns[def.Index(keys[pos])]
		switch {
		// Its columns the key's, compared by their types' default
		// operators (bpchar_ops or text_pattern_ops order otherwise), all
		// ascending with NULLs last or all the reverse (read backwards):
		// else the index cannot give the chunk's ORDER BY.
		case name != keys[pos] || !defaultClass || option != direction || option != 0 && option != 3:
			serves = false
		case textColumn(col) && !byBytes:
			serves = false
		case textColumn(col) && own:
			order[name] = ""
		case textColumn(col):
			order[name] = " COLLATE " + collation
		}
		pos++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if serves && pos == len(keys) {
		return order, nil
	}
	return nil, nil
}

// indexable says every column of a table's key is an integer, a uuid or
// text: the keys an index can give in routing order.
func indexable(def *source.TableDef) bool {
	for _, k := range def.KeyNames() {
		col := def.Columns[def.Index(k)]
		if !intColumn(col) && !uuidColumn(col) && !textColumn(col) {
			return false
		}
	}
	return true
}

// textColumn says a key column is text whose text form is its value (not
// char(n), whose comparisons ignore its padding, nor a domain or citext).
func textColumn(col source.ColumnDef) bool {
	t, _, _ := strings.Cut(col.Type, "(")
	return t == "text" || t == "varchar"
}

// maxCopyWarned bounds the tables CopyWarnings looks at: a query or two
// each, for `changefeed get`.
const maxCopyWarned = 50

// CopyWarnings says, of tables whose initial snapshot is still copying
// (at most maxCopyWarned of them; copying: each with the key its
// partitions were cut on and copy by), which cannot copy on because their
// primary key changed (keyChangedWhileCopying), and which are read by sorting each
// chunk and what index would serve them (sortedWhy), for `changefeed
// get`: the copying capture logs it, the operator asking sees it here.
// Nothing when the database cannot be asked.
func CopyWarnings(ctx context.Context, uri string, copying map[string]source.CopyingTable) []string {
	var out []string
	eachCopying(ctx, uri, copying, func(conn *pgx.Conn, cat *catalog, encoding, t string, def *source.TableDef) {
		if why := keyChangedWhileCopying(t, copying[t], def); why != "" {
			out = append(out, "initial snapshot: "+why)
			return
		}
		order, err := cat.byteOrder(ctx, t, def)
		if err != nil || orderOf(def, order, false) != sortedOrder {
			return
		}
		if timeLed(def) {
			if ok, err := timeOrdered(ctx, conn, t, def); err != nil || ok {
				return
			}
		}
		out = append(out, "initial snapshot: "+sortedWhy(t, def, encoding == "UTF8"))
	})
	return out
}

// KeysChangedWhileCopying says, of tables whose initial snapshot is
// still copying, which cannot copy on because their primary key changed
// (table: why): copied again under the new key, by the coordinator when
// the source URI has auto-remedy (the default; nothing without it).
func KeysChangedWhileCopying(ctx context.Context, uri string, copying map[string]source.CopyingTable) map[string]string {
	if cfg, err := ParseURI(uri); err != nil || !cfg.AutoRemedy || cfg.Snapshot == "never" {
		// (snapshot=never: nothing copies, and a table copied again
		// would be emptied in the sink.)
		return nil
	}
	out := map[string]string{}
	eachCopying(ctx, uri, copying, func(_ *pgx.Conn, _ *catalog, _, t string, def *source.TableDef) {
		if why := keyChangedWhileCopying(t, copying[t], def); why != "" {
			out[t] = why
		}
	})
	return out
}

// eachCopying calls f for each of the copying tables (at most
// maxCopyWarned, in order) that has a primary key now, with its
// definition in the catalog; nothing when the database cannot be asked.
func eachCopying(ctx context.Context, uri string, copying map[string]source.CopyingTable, f func(conn *pgx.Conn, cat *catalog, encoding, table string, def *source.TableDef)) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return
	}
	conn, err := snapshotConn(ctx, cfg)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	var encoding string
	if conn.QueryRow(ctx, `SELECT current_setting('server_encoding')`).Scan(&encoding) != nil {
		return
	}
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	tables := slices.Sorted(maps.Keys(copying))
	for _, t := range tables[:min(len(tables), maxCopyWarned)] {
		def, err := cat.tableDef(ctx, t)
		if err != nil || len(def.KeyNames()) == 0 {
			continue
		}
		f(conn, cat, encoding, t, def)
	}
}
