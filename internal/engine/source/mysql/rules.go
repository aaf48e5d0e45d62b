package mysql

// Table rules: tables= with patterns. A rule is "database.table" where
// either part may hold * (any run of characters) and ? (one character),
// or such a rule after ! to exclude what it matches; a rule without a
// database is in the URI's. A table is replicated when some rule
// includes it and none excludes it (their order does not matter). The
// system databases and the signal table are never matched. Names match as
// the server stores them (case-sensitive, as table names are on Linux).

import (
	"context"
	"database/sql"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// isRules says whether tables= holds a pattern or an exclusion.
func isRules(items []string) bool {
	for _, t := range items {
		if t = strings.TrimSpace(t); strings.HasPrefix(t, "!") || strings.ContainsAny(t, "*?") {
			return true
		}
	}
	return false
}

// ParseRules checks table rules and writes each as database.pattern
// (!database.pattern to exclude).
func ParseRules(database string, items []string) ([]string, error) {
	how := "write database.table with * and ? as wildcards, ! before a rule to exclude (e.g. tables=shop.*,!shop.audit)"
	var out []string
	includes := 0
	for _, raw := range items {
		t := strings.TrimSpace(raw)
		if t == "" {
			continue
		}
		neg := strings.HasPrefix(t, "!")
		db, table, ok := strings.Cut(strings.TrimPrefix(t, "!"), ".")
		if !ok {
			db, table = database, db
		}
		db, table = strings.Trim(db, "`"), strings.Trim(table, "`")
		if db == "" || table == "" || strings.ContainsAny(db+table, "./`'\" ") {
			return nil, fmt.Errorf("table rule %q: %s", t, how)
		}
		if _, err := path.Match(db, ""); err != nil {
			return nil, fmt.Errorf("table rule %q: %v; %s", t, err, how)
		}
		if _, err := path.Match(table, ""); err != nil {
			return nil, fmt.Errorf("table rule %q: %v; %s", t, err, how)
		}
		rule := db + "." + table
		if neg {
			rule = "!" + rule
		} else {
			includes++
		}
		if slices.Contains(out, rule) {
			return nil, fmt.Errorf("table rule %s is given twice", rule)
		}
		out = append(out, rule)
	}
	if includes == 0 {
		return nil, fmt.Errorf("the table rules exclude but include nothing: add what to replicate, e.g. tables=%s.*,!%s.audit", database, database)
	}
	return out, nil
}

// ruleMatches says whether the rules replicate database db's table.
func ruleMatches(rules []string, db, table string) bool {
	in := false
	for _, r := range rules {
		neg := strings.HasPrefix(r, "!")
		rdb, rtable, _ := strings.Cut(strings.TrimPrefix(r, "!"), ".")
		okDB, _ := path.Match(rdb, db)
		okTable, _ := path.Match(rtable, table)
		if okDB && okTable {
			if neg {
				return false
			}
			in = true
		}
	}
	return in
}

// systemDatabases are never matched by a rule.
var systemDatabases = []string{"mysql", "information_schema", "performance_schema", "sys"}

// resolveRules lists the tables the config's rules match now, in name
// order, and those they match that cannot be replicated, each with why.
func resolveRules(ctx context.Context, db *sql.DB, cfg Config) ([]string, []string, error) {
	all, err := ruleCandidates(ctx, db, cfg.Filter)
	if err != nil {
		return nil, nil, explain(cfg, err)
	}
	var matched, refused []string
	unfit := map[string]map[string]string{} // by database, by table
	for _, dt := range all {
		d, t := dt[0], dt[1]
		if slices.Contains(systemDatabases, strings.ToLower(d)) || t == signalTable || !ruleMatches(cfg.Filter, d, t) {
			continue
		}
		name := model.TableName(d, t)
		if _, err := ParseTables(cfg.Database, []string{name}); err != nil {
			refused = append(refused, name+": "+err.Error()+"; or exclude it with !"+d+"."+t)
			continue
		}
		if _, ok := unfit[d]; !ok {
			if unfit[d], err = unfitIn(ctx, db, d); err != nil {
				return nil, nil, explain(cfg, err)
			}
		}
		why, ok := unfit[d][t]
		if !ok {
			why = notThere(name) // dropped since it was listed
		}
		if why != "" {
			refused = append(refused, name+": "+why+"; or exclude it with !"+d+"."+t)
			continue
		}
		matched = append(matched, name)
	}
	slices.Sort(matched)
	return matched, refused, nil
}

// ruleCandidates lists the base tables rules may match, as (database,
// table). It lists the tables of the databases
// some including rule's database matches alone (a rule "shop.*" reads
// shop's catalog only): listing the base tables of every database read
// every table's definition of the server (TABLE_TYPE), each time the
// rules were followed (317 on a test server with 200 tables in another
// database). Where lower_case_table_names is not 0 every database is
// listed, as before: MariaDB lowercases a database looked up by name, so
// that one named Shop would come back as shop and match no rule.
func ruleCandidates(ctx context.Context, db *sql.DB, rules []string) ([][2]string, error) {
	const list, order = "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'", " ORDER BY 1, 2"
	var lower int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&lower); err != nil {
		return nil, err
	}
	dbs := []string{""} // "": every database
	if lower == 0 {
		var err error
		if dbs, err = ruleDatabases(ctx, db, rules); err != nil || len(dbs) == 0 {
			return nil, err
		}
	}
	var all [][2]string
	for _, d := range dbs {
		// One query a database, by "=": an IN of names that compare
		// equal in the catalog's collation (Shop and shop, shop and
		// shöp) was read as the first alone, and the others' tables
		// would have left the changefeed.
		q, args := list+order, []any(nil)
		if d != "" {
			q, args = list+" AND TABLE_SCHEMA = ?"+order, []any{d}
		}
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var d, t string
			if err := rows.Scan(&d, &t); err != nil {
				rows.Close()
				return nil, err
			}
			all = append(all, [2]string{d, t})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// ruleDatabases lists the databases some rule that includes tables
// matches (SCHEMATA: their names, no table read).
func ruleDatabases(ctx context.Context, db *sql.DB, rules []string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		if slices.Contains(systemDatabases, strings.ToLower(d)) {
			continue
		}
		for _, r := range rules {
			rdb, _, _ := strings.Cut(r, ".")
			if ok, _ := path.Match(rdb, d); ok && !strings.HasPrefix(r, "!") {
				out = append(out, d)
				break
			}
		}
	}
	return out, rows.Err()
}

// unfitIn is tableUnfit for every table of database schema at once, in
// two queries, by table name ("": it can be replicated; a table absent
// is gone, or hidden from the user). Rules are followed every 30 s, and
// tableUnfit's three queries for each table matched took 1.1 s a round
// for 1,000 tables.
func unfitIn(ctx context.Context, db *sql.DB, schema string) (map[string]string, error) {
	out := map[string]string{}
	keyed := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT TABLE_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = ? AND INDEX_NAME = 'PRIMARY'`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return nil, err
		}
		keyed[t] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = db.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME, COALESCE(CHARACTER_SET_NAME, '') FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var t, col, set string
		if err := rows.Scan(&t, &col, &set); err != nil {
			return nil, err
		}
		table := model.TableName(schema, t)
		if _, seen := out[t]; !seen {
			out[t] = ""
			if !keyed[t] {
				out[t] = noPrimaryKey(table)
			}
		}
		if out[t] == "" && set != "" {
			out[t] = undecodable(table, col, set) // the first, as tableUnfit says it
		}
	}
	return out, rows.Err()
}

// Follow is what a stored URI's table rules match now; ok is false for a
// URI without rules. A table dropped upstream and created again under its
// name since (its resume point says it was dropped) is left out this
// time, so that the changefeed ends the old table, and matched the next
// time, so that the new one comes as a table added (its rows copied, the
// sink's old rows truncated).
func Follow(ctx context.Context, uri string, pos source.Position) (source.Followed, bool, error) {
	cfg, err := ParseURI(uri)
	if err != nil || len(cfg.Filter) == 0 {
		return source.Followed{}, false, err
	}
	var p position
	if len(pos) > 0 {
		if err := source.DecodePosition(pos, &p); err != nil {
			return source.Followed{}, true, fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
		}
	}
	matched, err := matchRules(ctx, cfg)
	if err != nil {
		return source.Followed{}, true, err
	}
	f := source.Followed{Refused: matched.Refused, At: matched.At}
	for _, t := range matched.Tables {
		if p.Tables[t].Dropped {
			continue
		}
		f.Tables = append(f.Tables, t)
	}
	return f, true, nil
}

// matchRules is what the config's rules match now, and what they refuse.
func matchRules(ctx context.Context, cfg Config) (source.Followed, error) {
	db, err := open(ctx, cfg)
	if err != nil {
		return source.Followed{}, err
	}
	defer db.Close()
	matched, refused, err := resolveRules(ctx, db, cfg)
	if err != nil {
		return source.Followed{}, err
	}
	f := source.Followed{Tables: matched, Refused: refused}
	f.At, err = serverNow(ctx, db)
	return f, err
}

// serverNow is the server's clock, as positions read it (UTC), after
// everything the matching read.
func serverNow(ctx context.Context, db *sql.DB) (model.Ts, error) {
	var epoch string
	if err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&epoch); err != nil {
		return 0, err
	}
	secs, frac, _ := strings.Cut(epoch, ".")
	s, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the server's clock %q: %w", epoch, err)
	}
	micros := int64(0)
	if frac != "" {
		frac = (frac + "000000")[:6]
		if micros, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return 0, fmt.Errorf("the server's clock %q: %w", epoch, err)
		}
	}
	return model.TsFromMicros(s*1_000_000 + micros), nil
}

// orNone lists what a rule refused, or says nothing was.
func orNone(refused []string) string {
	if len(refused) == 0 {
		return "none refused"
	}
	return "refused: " + strings.Join(refused, "; ")
}
