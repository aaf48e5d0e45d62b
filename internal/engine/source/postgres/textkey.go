package postgres

import (
	"context"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A key of text is routed by the bytes of its text. Where the column's
// collation orders text so too ("C" or "POSIX", PostgreSQL 17's builtin
// C and C.UTF-8, in a UTF-8 database: by the bytes, or by code point,
// which in UTF-8 is the same), its primary key's index gives that order,
// and a chunk is a range read of the index, like an integer key's. In
// any other collation the index's order is not the bytes', and a chunk
// is read in the bytes' order by sorting (COLLATE "C"): every chunk
// sorts the rest of its partition's range (TestATextKeyedTableIsCopiedFromItsIndex).
//
// The comparison must be the column's own collation for the planner to
// use the index: COLLATE "C" on a column of the database's default
// collation is another collation to it, even where the default is C.

// bytewiseKeys names the key columns of text (text, varchar) of table
// (schema.name) whose own collation orders them by their bytes.
func (c *catalog) bytewiseKeys(ctx context.Context, table string, def *source.TableDef) (map[string]bool, error) {
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
	// A collation of its own (a libc collation with C's rules, or
	// builtin), or the database's default.
	own := `co.collprovider = 'c' AND co.collcollate IN ('C', 'POSIX')`
	byDefault := `d.datcollate IN ('C', 'POSIX')`
	if version >= 150000 {
		byDefault = `d.datlocprovider = 'c' AND d.datcollate IN ('C', 'POSIX')`
	}
	if version >= 170000 {
		own = `(` + own + `) OR (co.collprovider = 'b' AND co.colllocale IN ('C', 'C.UTF-8'))`
		byDefault = `(` + byDefault + `) OR (d.datlocprovider = 'b' AND d.datlocale IN ('C', 'C.UTF-8'))`
	}
	rows, err := c.conn.Query(ctx, `
SELECT a.attname FROM pg_attribute a
JOIN pg_collation co ON co.oid = a.attcollation
JOIN pg_database d ON d.datname = current_database()
WHERE a.attrelid = $1::regclass AND a.attname = ANY($2) AND current_setting('server_encoding') = 'UTF8'
  AND CASE WHEN co.collprovider = 'd' THEN `+byDefault+` ELSE `+own+` END`, quoteQualified(table), names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

// textColumn says a key column is text whose text form is its value (not
// char(n), whose comparisons ignore its padding, nor a domain or citext).
func textColumn(col source.ColumnDef) bool {
	t, _, _ := strings.Cut(col.Type, "(")
	return t == "text" || t == "varchar"
}
