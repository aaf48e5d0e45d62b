package postgres

// Table filters: tables= with patterns. A rule is "schema.table" where
// either part may hold * (any run of characters) and ? (one character),
// or such a rule after ! to exclude what it matches; a name without a
// schema is in public. A table is replicated when some rule includes it
// and none excludes it (the order of the rules does not matter). The
// system schemas are never matched, nor a partition whose root is.

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// allTables is the rule of a source URI without tables=: every table
// outside the system schemas that the user may read (those it may not
// read are left out; other rules refuse them).
const allTables = "*.*"

// isFilter says whether tables= holds a pattern or an exclusion.
func isFilter(items []string) bool {
	for _, t := range items {
		if t = strings.TrimSpace(t); strings.HasPrefix(t, "!") || strings.ContainsAny(t, "*?") {
			return true
		}
	}
	return false
}

// ParseFilter checks and normalizes filter rules.
func ParseFilter(items []string) ([]string, error) {
	var out []string
	includes := 0
	for _, t := range items {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		neg := strings.HasPrefix(t, "!")
		rule, err := ruleName(strings.TrimPrefix(t, "!"))
		if err != nil {
			return nil, fmt.Errorf("table rule %q: %v", t, err)
		}
		if _, err := path.Match(rule, ""); err != nil {
			return nil, fmt.Errorf("table rule %q: %v", t, err)
		}
		if neg {
			rule = "!" + rule
		} else {
			includes++
		}
		out = append(out, rule)
	}
	if includes == 0 {
		return nil, fmt.Errorf("the table rules exclude but include nothing: add what to replicate, e.g. tables=public.*,!public.audit")
	}
	if dup := firstDuplicate(out); dup != "" {
		return nil, fmt.Errorf("table rule %s is given twice", dup)
	}
	return out, nil
}

// matches says whether the rules replicate a table.
func matches(rules []string, table string) bool {
	in := false
	// path.Match's * stops at a slash, which a quoted name may hold: such
	// a table is matched like any other, to be refused with why.
	table = strings.ReplaceAll(table, "/", "\x00")
	for _, r := range rules {
		neg := strings.HasPrefix(r, "!")
		if ok, _ := path.Match(strings.ReplaceAll(strings.TrimPrefix(r, "!"), "/", "\x00"), table); ok {
			if neg {
				return false
			}
			in = true
		}
	}
	return in
}

// candidate is a table the rules may match: its name, its relation, the
// partitioned table it is a partition of, whether the user may read it,
// and why its name cannot be replicated ("" when it can).
type candidate struct {
	name, root string
	oid        uint32
	readable   bool
	unfit      string
}

// Refused is a table a filter matches that cannot be replicated, and why.
type Refused struct {
	Table, Why string
}

// resolveFilter lists the tables the rules match now, in name order,
// and those they match that cannot be replicated (a name with a slash,
// no primary key nor REPLICA IDENTITY FULL).
func resolveFilter(ctx context.Context, cat *catalog, cfg Config) ([]candidate, []Refused, error) {
	rows, err := cat.conn.Query(ctx, `
SELECT c.oid::int8, n.nspname, c.relname,
       (SELECT rn.nspname FROM pg_class r JOIN pg_namespace rn ON rn.oid = r.relnamespace
         WHERE c.relispartition AND r.oid = pg_partition_root(c.oid)),
       (SELECT r.relname FROM pg_class r WHERE c.relispartition AND r.oid = pg_partition_root(c.oid)),
       has_table_privilege(c.oid, 'SELECT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp%'
ORDER BY 1, 2`)
	if err != nil {
		return nil, nil, explain(cfg, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		var schema, table string
		var rootSchema, rootTable *string
		var oid int64
		err := r.Scan(&oid, &schema, &table, &rootSchema, &rootTable, &c.readable)
		c.oid = uint32(oid)
		c.name = model.TableName(schema, table)
		if rootSchema != nil && rootTable != nil {
			c.root = model.TableName(*rootSchema, *rootTable)
		}
		c.unfit = unfit(schema, table)
		return c, err
	})
	if err != nil {
		return nil, nil, explain(cfg, err)
	}
	var matched []candidate
	var refused []Refused
	for _, c := range all {
		if !matches(cfg.Filter, c.name) || c.root != "" && matches(cfg.Filter, c.root) {
			continue // a partition of a matched root comes as the root's rows
		}
		if !c.readable {
			if slices.Equal(cfg.Filter, []string{allTables}) {
				continue
			}
			refused = append(refused, Refused{c.name, "the user may not read it: GRANT SELECT ON " + c.name + " to the user, or exclude it with !" + c.name})
			continue
		}
		if c.unfit != "" {
			refused = append(refused, Refused{c.name, c.unfit + "; or exclude it with !" + c.name})
			continue
		}
		if _, err := checkTable(ctx, cat, cfg, c.name); err != nil {
			refused = append(refused, Refused{c.name, err.Error() + "; or exclude it with !" + c.name})
			continue
		}
		matched = append(matched, c)
	}
	sort.Slice(matched, func(i, j int) bool { return matched[i].name < matched[j].name })
	return matched, refused, nil
}

// Follow is what a stored URI's table rules match now; ok is false for a
// URI without rules. A table dropped and created again under its name
// since the changefeed last followed its rules is left out this time, so
// that the changefeed ends the old table, and matched the next time, so
// that it takes the new one as a table come back (its rows copied, the
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
	f, err := follow(ctx, cfg, p.oids())
	return f, true, err
}

// follow resolves the rules against the catalog; a table whose relation
// is not the one known under its name (known: name -> OID) is left out.
func follow(ctx context.Context, cfg Config, known map[string]uint32) (source.Followed, error) {
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return source.Followed{}, explain(cfg, err)
	}
	defer cat.Close()
	matched, refused, err := resolveFilter(ctx, cat, cfg)
	if err != nil {
		return source.Followed{}, err
	}
	var f source.Followed
	for _, t := range matched {
		if oid := known[t.name]; oid != 0 && oid != t.oid {
			continue
		}
		f.Tables = append(f.Tables, t.name)
	}
	for _, r := range refused {
		f.Refused = append(f.Refused, r.Table+": "+r.Why)
	}
	if f.At, err = dbNow(ctx, cat); err != nil {
		return source.Followed{}, explain(cfg, err)
	}
	return f, nil
}

// Preview says what a new changefeed's source URI would replicate, and
// what it refuses, without creating anything upstream: the server's
// settings and the user's rights are checked as a create checks them.
func Preview(ctx context.Context, uri string) (source.Followed, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return source.Followed{}, err
	}
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return source.Followed{}, explain(cfg, err)
	}
	defer cat.Close()
	if err := preflight(ctx, cat, cfg); err != nil {
		return source.Followed{}, err
	}
	if len(cfg.Filter) > 0 {
		return follow(ctx, cfg, nil)
	}
	var f source.Followed
	for _, t := range cfg.Tables {
		if _, err := checkTable(ctx, cat, cfg, t); err != nil {
			f.Refused = append(f.Refused, t+": "+err.Error())
			continue
		}
		f.Tables = append(f.Tables, t)
	}
	if _, err := partitionRoots(ctx, cat.conn, Config{ConnString: cfg.ConnString, Tables: f.Tables}); err != nil {
		f.Refused = append(f.Refused, err.Error())
	}
	return f, nil
}

// ruleName reads one rule (without its !) as model.TableName writes
// names, so that it matches them: a part in double quotes is taken as it
// is (a name with capitals: public."Orders"), an unquoted one is
// lowercase with * and ? as wildcards; a rule without a schema is in
// public.
func ruleName(rule string) (string, error) {
	how := fmt.Errorf("use schema.table with lowercase names or double-quoted ones (public.\"Orders\"), * and ? as wildcards, ! before a rule to exclude (e.g. tables=public.*,!public.audit)")
	parts := model.SplitOutsideQuotes(rule, '.')
	if len(parts) > 2 {
		return "", how
	}
	for i, raw := range parts {
		if strings.HasPrefix(raw, `"`) {
			_, name, err := model.ParseTableName(raw)
			if err != nil {
				return "", how
			}
			parts[i] = model.TableName("", name)
		} else if raw == "" || strings.Trim(raw, "abcdefghijklmnopqrstuvwxyz0123456789_$*?") != "" {
			return "", how
		}
	}
	if len(parts) == 1 {
		return "public." + parts[0], nil
	}
	return parts[0] + "." + parts[1], nil
}
