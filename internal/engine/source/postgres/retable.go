package postgres

// A running changefeed's tables change (changefeed update): the
// publication gains and loses them (pubchange.go), and the reader's
// resume point learns the added tables' schemas and forgets the removed
// ones. The changefeed is paused meanwhile, so no reader holds the
// resume point.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Retable computes, and with apply makes, the change of a stored URI's
// tables to tables. Added tables are checked as a create checks them;
// the publication cdcctl named gains them (the result's Undo takes them
// out again if the change cannot be stored), and loses the removed ones
// by the result's Finish, once the change is stored (pubchange.go). One
// the operator named must publish the added tables already: cdcctl does
// not change it. at is the changefeed's checkpoint: the added tables' schemas
// start there, as their partitions do, and their rows come from the
// initial snapshot (snapshot=initial) and the changes after it.
func Retable(ctx context.Context, uri string, pos source.Position, tables []string, at model.Ts, apply bool, again ...string) (source.Retabled, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return source.Retabled{}, err
	}
	var p position
	if err := source.DecodePosition(pos, &p); err != nil {
		return source.Retabled{}, fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
	}
	rules := cfg.Filter
	var next []string
	if isFilter(tables) {
		// New rules: the tables they match now.
		if rules, err = ParseFilter(tables); err != nil {
			return source.Retabled{}, err
		}
		f, err := follow(ctx, Config{ConnString: cfg.ConnString, Filter: rules, Snapshot: cfg.Snapshot}, p.oids())
		if err != nil {
			return source.Retabled{}, err
		}
		if len(f.Refused) > 0 {
			return source.Retabled{}, fmt.Errorf("the table rules match tables that cannot be replicated:\n  %s", strings.Join(f.Refused, "\n  "))
		}
		next = f.Tables
	} else if next, err = ParseTables(tables); err != nil {
		return source.Retabled{}, err
	}
	if len(next) == 0 {
		return source.Retabled{}, fmt.Errorf("a changefeed needs at least one table; to stop replicating all of them, remove the changefeed")
	}
	if len(rules) > 0 {
		for _, t := range next {
			if !matches(rules, t) {
				return source.Retabled{}, fmt.Errorf("table %s does not match the changefeed's table rules (%s), which decide its tables: change the rules instead (changefeed update --tables 'RULES')", t, strings.Join(rules, ","))
			}
		}
	}
	out := source.Retabled{Tables: next}
	out.Added, out.Removed = source.TablesDiff(cfg.Tables, next)
	for _, t := range again {
		if cfg.Snapshot == "never" {
			return source.Retabled{}, fmt.Errorf("table %s cannot be copied again: the changefeed was created with snapshot=never, so nothing would copy it and its rows would be truncated in the sink", t)
		}
		if !slices.Contains(cfg.Tables, t) || !slices.Contains(next, t) {
			return source.Retabled{}, fmt.Errorf("table %s is copied again only as one of the changefeed's tables, before and after the change", t)
		}
	}
	out.Again = again
	if len(out.Added)+len(out.Removed)+len(again) == 0 && slices.Equal(rules, cfg.Filter) {
		return source.Retabled{}, fmt.Errorf("the changefeed replicates exactly these tables already (%s)", strings.Join(cfg.Tables, ", "))
	}
	to := cfg
	to.Tables, to.Filter = next, rules
	out.Rules = rules

	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return source.Retabled{}, explain(cfg, err)
	}
	defer cat.Close()
	// The tables copied again are read anew, as added ones.
	fresh := append(slices.Clone(out.Added), again...)
	defs, oids, nums := map[string]*source.TableDef{}, map[string]uint32{}, map[string][]int16{}
	for _, t := range fresh {
		if defs[t], err = checkTable(ctx, cat, to, t); err != nil {
			return source.Retabled{}, err
		}
		if oids[t], err = cat.oidOf(ctx, t); err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
		if nums[t], err = cat.nums(ctx, oids[t], defs[t]); err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
	}
	roots, err := partitionRoots(ctx, cat.conn, to)
	if err != nil {
		return source.Retabled{}, err
	}
	ours := strings.HasPrefix(cfg.Publication, "cdcctl_")
	if !ours {
		// The operator's publication: it must publish the new tables
		// already, and it may publish the removed ones still.
		if err := ensurePublication(ctx, cat.conn, to); err != nil {
			return source.Retabled{}, err
		}
	}
	// What the publication names before the change, and the relations
	// of the removed tables (a member renamed upstream is one): what it
	// loses is read from them, the same with apply or without (the add
	// takes a table swapped for one of its partition tree out already).
	var members []publicationMember
	removedRels := map[uint32]string{}
	if ours {
		if members, err = publicationMembers(ctx, cat.conn, to); err != nil {
			return source.Retabled{}, err
		}
		for _, t := range out.Removed {
			if oid := p.Tables[t].OID; oid != 0 {
				removedRels[oid] = t
			}
		}
	}
	if apply && ours {
		if out.Undo, err = publishAdded(ctx, cat, to, fresh, oids, out.Removed, len(roots) > 0); err != nil {
			return source.Retabled{}, err
		}
	}

	if p.Tables == nil {
		p.Tables = map[string]TableState{}
	}
	for _, t := range out.Removed {
		delete(p.Parts, t)
		if st, ok := p.Tables[t]; ok && st.Def != nil {
			now, exists, err := nameNow(ctx, cat, t, st.OID)
			if err != nil {
				return source.Retabled{}, explain(cfg, err)
			}
			if !exists || now != t {
				if out.Ended == nil {
					out.Ended = map[string]source.EndedTable{}
				}
				out.Ended[t] = source.EndedTable{Def: st.Def, RenamedTo: now}
			}
		}
		delete(p.Tables, t)
		if p.Gone == nil {
			p.Gone = map[string]model.Ts{}
		}
		p.Gone[t] = at
	}
	if len(out.Removed) > 0 {
		// One reading of the clock, after every removed table's name
		// was read: each had its rename or drop before it. Before the
		// added tables' (joined): a table renamed ends under its old
		// name before its new name's TRUNCATE and copied rows, in the
		// sink's commit order.
		if out.EndedAt, err = dbNow(ctx, cat); err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
		if p.GoneAt == nil {
			p.GoneAt = map[string]model.Ts{}
		}
		for _, t := range out.Removed {
			p.GoneAt[t] = out.EndedAt
		}
	}
	var joined model.Ts // with a snapshot: the database's clock now
	if len(fresh) > 0 && cfg.Snapshot != "never" {
		if joined, err = dbNow(ctx, cat); err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
		joined = max(joined, out.EndedAt+1)
	}
	for _, t := range fresh {
		st := TableState{Def: defs[t], Since: at, OID: oids[t], JoinedAt: joined, Nums: nums[t]}
		if _, was := p.Gone[t]; was || slices.Contains(again, t) {
			// Back after it was removed: the sink still has the rows it
			// had then, some deleted since. The stream truncates it in the
			// sink after at, then its snapshot copies it again. With a
			// snapshot, after now: the update that removed it may have
			// written its DROP (or RENAME) to the sink when it was made,
			// after at (the checkpoint stays while the changefeed is
			// paused), and the TRUNCATE, the newer schema, must come
			// after; the rows in between are in the copy.
			st.ResetAt = max(at, joined)
			delete(p.Gone, t)
			delete(p.GoneAt, t)
		}
		p.Tables[t] = st
	}
	if p.PartsKnown && len(fresh) > 0 && cfg.Snapshot != "never" {
		// An added table's partitions now are in its copy.
		trees, err := treesOf(ctx, cat, fresh)
		if err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
		parts := map[string][]uint32{}
		for t, oids := range p.Parts {
			parts[t] = oids
		}
		for t, oids := range trees {
			parts[t] = oids
		}
		p.Parts = parts
	}
	if ours {
		// Once the change is stored (source.Retabled.Finish): taken out
		// now, a change that then failed to be stored would put them back
		// having missed their changes in between.
		keep := publicationKeeps(next, p)
		for _, m := range keep.dropped(members) {
			if t, ok := removedRels[m.oid]; ok {
				m.name = t // named as the changefeed named it
			}
			out.Unpublished = append(out.Unpublished, m.name)
		}
		slices.Sort(out.Unpublished)
		out.Unpublished = slices.Compact(out.Unpublished)
		if apply {
			out.Finish = func(ctx context.Context) error { return trimPublication(ctx, to, keep) }
		}
	}
	if out.Position, err = source.EncodePosition(p); err != nil {
		return source.Retabled{}, err
	}
	out.URI = to.URI()
	return out, nil
}

// dbNow is the database's clock as positions read it (commit times),
// after every transaction this session can see: a table renamed before
// it is read committed before it.
func dbNow(ctx context.Context, cat *catalog) (model.Ts, error) {
	var now time.Time
	if err := cat.conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return 0, err
	}
	return model.TsFromTime(now), nil
}

// nameNow is a table's name now, found by its relation (a rename keeps
// it), and whether it exists at all; a table whose relation is not known
// is looked up by its name.
func nameNow(ctx context.Context, cat *catalog, table string, oid uint32) (string, bool, error) {
	if oid == 0 {
		var exists bool
		err := cat.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoteQualified(table)).Scan(&exists)
		return table, exists, err
	}
	var schema, name string
	err := cat.conn.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid::int8 = $1`, int64(oid)).Scan(&schema, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return model.TableName(schema, name), err == nil, err
}
