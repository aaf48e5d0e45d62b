package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// cascades warns of the replicated tables whose foreign keys cascade (ON
// DELETE or ON UPDATE CASCADE, SET NULL, SET DEFAULT): InnoDB changes the
// rows a cascade reaches itself, and the server writes no row events for
// them (PostgreSQL's WAL has them), so the sink keeps those rows as they
// were. What to do is the application's: change the rows itself, or make
// the key RESTRICT. Nothing when the catalog cannot be asked.
func cascades(ctx context.Context, db *sql.DB, tables []string) []string {
	if len(tables) == 0 {
		return nil
	}
	ours := map[string]bool{}
	var schemas, names []any
	for _, t := range tables {
		ours[t] = true
		s, n := model.SplitTableName(t)
		if !slices.Contains(schemas, any(s)) {
			schemas = append(schemas, s)
		}
		names = append(names, n)
	}
	// The tables' names too, where they are not too many for one query:
	// MariaDB opens every table of the databases named to read their
	// keys, this changefeed's or not, and this is asked every 30 s (200
	// tables opened for 2 of them in a test).
	byName := ""
	args := schemas
	if len(names) <= 1000 {
		// BINARY: an IN of names equal in the catalog's collation
		// (Orders and orders) is read as its first name alone.
		byName = " AND BINARY TABLE_NAME IN (?" + strings.Repeat(", ?", len(names)-1) + ")"
		args = append(slices.Clip(schemas), names...)
	}
	rows, err := db.QueryContext(ctx, `SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE
FROM information_schema.REFERENTIAL_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA IN (?`+strings.Repeat(", ?", len(schemas)-1)+`)`+byName+`
  AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION'))
ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME`, args...)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var schema, table, name, refSchema, refTable, onDelete, onUpdate string
		if rows.Scan(&schema, &table, &name, &refSchema, &refTable, &onDelete, &onUpdate) != nil {
			return nil
		}
		t := model.TableName(schema, table)
		if !ours[t] {
			continue
		}
		var rules []string
		if onDelete != "RESTRICT" && onDelete != "NO ACTION" {
			rules = append(rules, "ON DELETE "+onDelete)
		}
		if onUpdate != "RESTRICT" && onUpdate != "NO ACTION" {
			rules = append(rules, "ON UPDATE "+onUpdate)
		}
		out = append(out, fmt.Sprintf("%s: its foreign key %s to %s is %s, and the server writes no row events for the rows a cascade changes: the sink keeps them as they were (verify shows them); have the application change those rows itself, or make the key RESTRICT",
			t, name, model.TableName(refSchema, refTable), strings.Join(rules, ", ")))
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}
