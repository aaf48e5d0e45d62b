package mysql

import (
	"context"
	"database/sql"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Online schema changes. gh-ost and pt-online-schema-change change a
// large table without locking it: they create a shadow table (gh-ost
// _t_gho, pt-osc _t_new), ALTER it, copy the table's rows into it while
// keeping it in step with the table's changes, and then swap the two in
// one statement: RENAME TABLE t TO _t_del, _t_gho TO t (pt-osc: _t_old,
// _t_new). The table under its name then holds the same rows with the
// new columns. Read as a rename, the table was held, to be copied again
// whole, at every migration. The reader keeps the ALTER statements each
// replicated table's shadow received and, at the swap, applies them to
// the table's schema (the schema history, alter.go) as if they had been
// the table's own: a schema change, no hold. (TiDB DM does the same.)
// They are kept in the table's state in the resume point (Shadow), from
// the shadow's CREATE on: a reader started again mid-migration has them.

// shadowOf says which replicated table a shadow table of an online
// schema change belongs to ("" when name is not one): _t_gho or _t_new
// in t's database.
func shadowOf(name string, tables map[string]tableState) string {
	return oscTable(name, tables, "_gho", "_new")
}

// oscTable is the replicated table whose name, between "_" and one of
// the suffixes, is name's.
func oscTable(name string, tables map[string]tableState, suffixes ...string) string {
	schema, n := model.SplitTableName(name)
	if !strings.HasPrefix(n, "_") {
		return ""
	}
	for _, s := range suffixes {
		if base, ok := strings.CutSuffix(n[1:], s); ok && base != "" {
			if t := model.TableName(schema, base); hasTable(tables, t) {
				return t
			}
		}
	}
	return ""
}

func hasTable(tables map[string]tableState, t string) bool {
	st, ok := tables[t]
	return ok && !st.Dropped
}

// cutOver says which replicated table a RENAME's pairs swap with its
// shadow (t to _t_del or _t_old, and _t_gho or _t_new to t, in one
// statement), and the shadow's name.
func cutOver(pairs [][2]string, tables map[string]tableState) (table, shadow string, ok bool) {
	for _, in := range pairs {
		t := in[1]
		if shadowOf(in[0], tables) != t {
			continue
		}
		for _, out := range pairs {
			if out[0] == t && oscTable(out[1], tables, "_del", "_old") == t {
				return t, in[0], true
			}
		}
	}
	return "", "", false
}

// asTables writes a shadow's ALTER statement as the table's own: the
// shadow's name, as written after ALTER TABLE, replaced by the table's.
func asTables(stmt, shadow, table string) string {
	_, sname := model.SplitTableName(shadow)
	_, tname := model.SplitTableName(table)
	for _, q := range []string{"`" + sname + "`", sname} {
		if i := strings.Index(stmt, q); i >= 0 {
			r := tname
			if q[0] == '`' {
				r = "`" + tname + "`"
			}
			return stmt[:i] + r + stmt[i+len(q):]
		}
	}
	return stmt
}

// cutOver applies to table t, at an online schema change's swap (stmt),
// the ALTERs its shadow received, each a schema change of t at the
// swap's position. When one cannot be followed from its statement, or
// the reader did not see them all (it started after the migration
// began), t's schema is followed by the catalog at its next row, as for
// an ALTER the history does not follow.
func (p *Puller) cutOver(ctx context.Context, t, shadow, stmt string, alters []string, catalog func() (*sql.DB, error),
	cur *txn, at *position, hold func(table, why string), pending map[string]string) {
	st := at.Tables[t]
	var ddls []*source.Event
	followed := len(alters) > 0 && pending[t] == "" // a stale definition is not followed further
	for _, q := range alters {
		own := asTables(q, shadow, t)
		a, ok := parseAlter(own, "")
		if !ok {
			followed = false
			break
		}
		a.table = t
		next, ddl, why, ok := followAlter(ctx, catalog, t, st, a, own, p.flavor)
		if why != "" {
			hold(t, why+" (an online schema change: "+stmt+")")
			return
		}
		if !ok {
			followed = false
			break
		}
		if ddl != nil {
			ddls = append(ddls, ddl)
		}
		st = next
	}
	if !followed {
		markUnfollowed(pending, at, t, "ALTER TABLE "+quoteTable(t)+" /* online schema change: "+strings.ReplaceAll(stmt, "*/", "* /")+" */")
		return
	}
	for _, d := range ddls { // one table's, in their order
		cur.addDDL(d)
	}
	at.Tables = withTable(at.Tables, t, st)
	p.log.Info("mysql source: an online schema change swapped a replicated table with its shadow; the table goes on with the shadow's schema",
		"changefeed", p.cf, "table", t, "shadow", shadow, "alters", len(alters))
}

// shadowAlters are the ALTERs a table's shadow received in a migration
// whose start (the shadow's CREATE) the reader saw; none otherwise.
func shadowAlters(st tableState) []string {
	if len(st.Shadow) == 0 {
		return nil
	}
	return st.Shadow[1:]
}

// withShadow is tables with table's migration state set (nil: none).
func withShadow(tables map[string]tableState, table string, shadow []string) map[string]tableState {
	st, ok := tables[table]
	if !ok || len(st.Shadow) == 0 && len(shadow) == 0 {
		return tables
	}
	st.Shadow = shadow
	return withTable(tables, table, st)
}
