package mysql

import (
	"maps"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// statement deals with the current transaction's schema statement at
// its commit, at ts: each kind in turn (truncate, drop, rename, create,
// a statement that changes no table, a shadow's ALTER, one that brings
// rows in), and what is left as an ALTER (alter).
//
// A schema change (its own transaction). An ALTER is
// followed at the table's next row (schema.go); a
// TRUNCATE goes to the sink as one (a new table version
// that no row before survives), and a DROP TABLE too (the
// table ends; one created again under its name is
// another); a rename holds the table, never decoded with
// a schema that no longer holds.
func (r *streamRun) statement(ts model.Ts) {
	q := withoutComments(r.cur.stmt)
	if r.truncate(q, ts) || r.drop(q, ts) || r.rename(q, ts) || r.create(q, ts) {
		return
	}
	if changesNoTable(q) {
		// A kind of statement that cannot change a
		// table's columns or name (a view, a grant,
		// OPTIMIZE TABLE, …): what it names goes on.
		return
	}
	if r.shadowAlter(q, ts) || r.rowsIn(q, ts) {
		return
	}
	r.alter(q, ts)
}

// truncate deals with a TRUNCATE of a replicated table: a new version
// of it, the statement written to the sink. It reports whether q was
// one.
func (r *streamRun) truncate(q string, ts model.Ts) bool {
	t, ok := truncated(q, r.cur.stmtDB)
	if !ok {
		return false
	}
	t = r.named(t)
	st, replicated := r.at.Tables[t]
	if !replicated {
		// Another table, or one named otherwise than ours
		// (letter case): what it names is held below (alter).
		return false
	}
	if !r.held[t] && r.joined(t, ts) {
		st.Version++
		r.at.Tables = withTable(r.at.Tables, t, st)
		r.cur.addDDL(&source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
			Statement: source.TruncatePrefix + quoteTable(t)})
	}
	return true
}

// drop deals with a DROP TABLE or DROP DATABASE: each replicated table
// it drops ends. It reports whether q was one.
func (r *streamRun) drop(q string, ts model.Ts) bool {
	names, ok := droppedTables(q, r.cur.stmtDB)
	for i := range names {
		names[i] = r.named(names[i])
	}
	if d, dropsDB := droppedDatabase(q); dropsDB {
		// Every replicated table in it ends, as one
		// dropped by name does.
		for _, t := range slices.Sorted(maps.Keys(r.at.Tables)) {
			if schema, _ := model.SplitTableName(t); r.sameDB(schema, d) {
				names = append(names, t)
			}
		}
		ok = true
	}
	if !ok {
		return false
	}
	for _, t := range names {
		st, replicated := r.at.Tables[t]
		if !replicated || st.Dropped || !r.joined(t, ts) {
			continue
		}
		if r.held[t] {
			continue // its end is the operator's
		}
		st.Version++
		st.Dropped, st.DroppedAt = true, ts
		r.at.Tables = withTable(r.at.Tables, t, st)
		r.cur.addDDL(&source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
			Statement: source.DropPrefix + quoteTable(t)})
		r.p.reportDropped(t, ts)
		r.p.log.Warn("mysql source: a replicated table was dropped upstream; it ends, the others go on", "changefeed", r.p.cf, "table", t)
	}
	return true
}

// rename deals with a RENAME TABLE: an online schema change's swap
// (cutOver), else each replicated table renamed held. It reports
// whether q was one.
func (r *streamRun) rename(q string, ts model.Ts) bool {
	pairs, ok := renamedTables(q, r.cur.stmtDB)
	if !ok {
		return false
	}
	for i := range pairs {
		pairs[i] = [2]string{r.named(pairs[i][0]), r.named(pairs[i][1])}
	}
	if t, shadow, ok := cutOver(pairs, r.at.Tables); ok && r.joined(t, ts) && !r.held[t] {
		// An online schema change's swap: the table goes
		// on with its shadow's ALTERs applied.
		r.p.cutOver(r.ctx, t, shadow, q, shadowAlters(r.at.Tables[t]), r.openCatalog, &r.cur, &r.at, r.h.hold, r.pending)
		r.at.Tables = withShadow(r.at.Tables, t, nil)
		delete(r.cols, t)
		delete(r.keyTypesByTable, t)
		delete(r.checkedMap, t)
		return true
	}
	// A table renamed is held (its rows go on under a
	// name that is not its); one renamed to a replicated
	// table's name comes into being, as a CREATE does.
	for _, pr := range pairs {
		if st, replicated := r.at.Tables[pr[0]]; replicated && r.joined(pr[0], ts) && !r.held[pr[0]] && !st.Dropped {
			r.h.renamed(r.ctx, pr[0], pr[1], q, slices.ContainsFunc(pairs, func(o [2]string) bool { return o[1] == pr[0] }))
		}
	}
	return true
}

// create deals with a CREATE TABLE: a shadow's (a migration begins), or
// one replacing a replicated table. It reports whether q was one.
func (r *streamRun) create(q string, ts model.Ts) bool {
	t, replaces, temporary, ok := createdTable(q, r.cur.stmtDB)
	if !ok {
		return false
	}
	t = r.named(t)
	if x := shadowOf(t, r.at.Tables); x != "" && r.joined(x, ts) {
		// A new migration of x begins.
		r.at.Tables = withShadow(r.at.Tables, x, []string{q})
	}
	// A CREATE TABLE changes no table but the one it
	// creates; the others it names (LIKE, a SELECT) are
	// only read. One of ours is a table added to the
	// changefeed after it was created, at a checkpoint
	// before this statement (a pause, or the table
	// rules meeting it at once): its definition is the
	// catalog's at the addition, its rows come from its
	// copy and the stream, so nothing is to follow. A
	// replacement of one of ours is a new table under
	// its name, held as a rename would be.
	if st, replicated := r.at.Tables[t]; replicated && replaces && !temporary && r.joined(t, ts) && !r.held[t] && !st.Dropped {
		r.h.toCopy(r.ctx, t, "replaced upstream ("+q+")")
	}
	return true
}

// shadowAlter deals with an ALTER of an online schema change's shadow
// table not replicated itself: kept for the swap. It reports whether q
// was one.
func (r *streamRun) shadowAlter(q string, ts model.Ts) bool {
	a, _ := parseAlter(q, r.cur.stmtDB)
	if a.table == "" {
		return false
	}
	a.table = r.named(a.table)
	// (A shadow replicated itself, which table rules
	// may have added, follows its own ALTERs; the swap
	// then follows the table by the catalog.)
	if x := shadowOf(a.table, r.at.Tables); x != "" && r.joined(x, ts) && !hasTable(r.at.Tables, a.table) {
		if sh := r.at.Tables[x].Shadow; len(sh) > 0 {
			// (Without its CREATE, the reader began
			// after the migration did: not all its ALTERs
			// are known, the swap follows the catalog.)
			r.at.Tables = withShadow(r.at.Tables, x, append(slices.Clone(sh), q))
		}
		return true
	}
	return false
}

// rowsIn deals with a statement that brings rows in with no row event
// (bringsRowsIn): the replicated tables it names are copied again. It
// reports whether q was one.
func (r *streamRun) rowsIn(q string, ts model.Ts) bool {
	why := bringsRowsIn(q)
	if why == "" {
		return false
	}
	// Rows came in with no row event: the sink lacks
	// them. Each replicated table it names (the one
	// altered, the one exchanged with) is held, to be
	// copied again.
	for _, t := range namedTables(q, r.cur.stmtDB, r.at.Tables) {
		if r.joined(t, ts) && !r.held[t] && !r.at.Tables[t].Dropped {
			r.h.toCopy(r.ctx, t, why)
		}
	}
	return true
}

// alter deals with any other schema statement, an ALTER above all: for
// each replicated table it names, followed from its statement where it
// can be (followAlter), else left to be followed at the table's next
// row, else the table held to be copied again.
func (r *streamRun) alter(q string, ts model.Ts) {
	alter, parsed := parseAlter(q, r.cur.stmtDB)
	alter.table = r.named(alter.table)
	for _, t := range namedTables(q, r.cur.stmtDB, r.at.Tables) {
		if !r.joined(t, ts) {
			continue
		}
		if parsed && !r.held[t] && !r.at.Tables[t].Dropped {
			if !strings.EqualFold(alter.table, t) {
				continue // another table's, naming this one in passing
			}
			if _, stale := r.pending[t]; alter.table == t && !stale {
				// (After a statement it did not follow the
				// definition it holds is stale: applied to it
				// this one would be wrong too.)
				// The schema history: applied here, at the
				// statement's position (history.go).
				next, ddl, why, ok := followAlter(r.ctx, r.openCatalog, t, r.at.Tables[t], alter, q, r.p.flavor)
				if why != "" && alter.renamedTo != "" {
					r.h.renamed(r.ctx, t, r.named(alter.renamedTo), q, false)
					continue
				}
				if why != "" {
					r.h.toCopy(r.ctx, t, why)
					continue
				}
				if ok {
					delete(r.pending, t)
					if ddl != nil {
						r.cur.addDDL(ddl)
						r.at.Tables = withTable(r.at.Tables, t, next)
						delete(r.cols, t)
						delete(r.keyTypesByTable, t)
						delete(r.checkedMap, t)
					} else if next.DefaultCharset != r.at.Tables[t].DefaultCharset {
						r.at.Tables = withTable(r.at.Tables, t, next)
					}
					continue
				}
			}
		}
		if followable(q) {
			markUnfollowed(r.pending, &r.at, t, q)
			continue
		}
		if !r.held[t] && !r.at.Tables[t].Dropped {
			r.h.toCopy(r.ctx, t, "renamed or changed upstream by a statement the reader does not follow ("+q+")")
		}
	}
}
