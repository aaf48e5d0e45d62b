package mysql

import (
	"context"
	"database/sql"
	"regexp"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Backfills gives verify the values an ALTER TABLE … ADD COLUMN … DEFAULT
// gave the rows already in a table: the server writes no row events for
// them, so a rebuild of the sink has rows without the column that the
// upstream shows with its default. queries are the table's schema
// changes as the sink holds them, in order; for each, the columns it
// added with a constant default and that value, as the server writes it
// (DEFAULT(c), so 1.5 in a DECIMAL(10,2) reads 1.50). A column whose
// default a later statement may have changed (SET DEFAULT, MODIFY,
// CHANGE, RENAME, DROP, or a statement this reader cannot read that names
// it) is left out: today's default says nothing of the value the rows
// got then, and verify reports those rows different rather than guess.
func (r *TableReader) Backfills(ctx context.Context, table string, queries []string) ([]map[string]string, error) {
	db, _ := model.SplitTableName(table)
	parsed := make([]alterTable, len(queries))
	readable := make([]bool, len(queries))
	for i, q := range queries {
		parsed[i], readable[i] = parseAlter(q, db)
	}
	type added struct {
		at  int
		col string
	}
	var wanted []added
	for i, a := range parsed {
		if !readable[i] {
			continue
		}
		for _, s := range a.specs {
			if s.op == "add" && s.col.literal && !changedLater(s.name, parsed[i+1:], readable[i+1:], queries[i+1:]) {
				wanted = append(wanted, added{i, s.name})
			}
		}
	}
	out := make([]map[string]string, len(queries))
	if len(wanted) == 0 {
		return out, nil
	}
	conn, err := open(ctx, r.cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, w := range wanted {
		var v sql.NullString
		err := conn.QueryRowContext(ctx, "SELECT DEFAULT("+quoteIdent(w.col)+") FROM "+quoteTable(table)+" LIMIT 1").Scan(&v)
		switch {
		case err == sql.ErrNoRows:
			return out, nil // no rows upstream: none to fill
		case err != nil || !v.Valid:
			continue // the column is gone, or its default NULL: nothing to fill
		}
		if out[w.at] == nil {
			out[w.at] = map[string]string{}
		}
		out[w.at][w.col] = v.String
	}
	return out, nil
}

// changedLater says a statement after the one that added col may have
// changed its default or the column itself.
func changedLater(col string, later []alterTable, readable []bool, queries []string) bool {
	named := regexp.MustCompile(`(?i)(^|[^A-Za-z0-9_$])` + regexp.QuoteMeta(col) + `($|[^A-Za-z0-9_$])`)
	for i, a := range later {
		if !readable[i] {
			if named.MatchString(queries[i]) {
				return true
			}
			continue
		}
		for _, s := range a.specs {
			if strings.EqualFold(s.name, col) && s.op != "add" {
				return true
			}
		}
		for _, d := range a.defaulted {
			if strings.EqualFold(d, col) {
				return true
			}
		}
	}
	return false
}
