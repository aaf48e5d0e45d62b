package postgres

// How a changefeed update changes the publication cdcctl made for the
// changefeed (cdcctl_<changefeed>): it gains the added tables before the
// change is stored in etcd (a stored change never waits for changes that
// are not sent), and they leave it again if the change cannot be stored;
// it loses the tables none of the changefeed's tables is only after the
// change is stored, but for a table swapped for one of its partition
// tree, which leaves with the add (publishAdded). Taken out first and put back after a change that
// failed, a table's changes in between were never sent: PostgreSQL
// decodes each change with the publication as it was when it was made.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/model"
)

// publishAdded adds the tables of fresh (oids: their relations) the
// publication does not publish yet, and turns publish_via_partition_root
// on where viaRoot asks for it and it was off, in one transaction. A
// removed table of the same partition tree as an added one (a
// partitioned table replaced by its partitions, or partitions by their
// root) leaves in that transaction too: the publication sends a
// partition's rows under its topmost ancestor it names, so with both
// named until the change is stored the added tables' changes meanwhile
// would go out under the removed one's name, and be dropped. It returns
// what undoes that (nil when nothing changed); an undo of such a swap
// cannot give back the changes in between (they are held at the
// resume where the triggers see the swap, as any table taken out).
func publishAdded(ctx context.Context, cat *catalog, cfg Config, fresh []string, oids map[string]uint32, removed []string, viaRoot bool) (func(context.Context) error, error) {
	conn := cat.conn
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	swapped, err := sameTree(ctx, cat, cfg, removed, fresh)
	if err != nil {
		return nil, err
	}
	// A table renamed upstream is published under its new name already
	// (the publication holds the relation), and its old name is not.
	published, err := publishedTables(ctx, conn, cfg)
	if err != nil {
		return nil, err
	}
	var add []string
	var added []uint32
	for _, t := range fresh {
		if !slices.Contains(published, t) {
			add, added = append(add, t), append(added, oids[t])
		}
	}
	turnOn := false
	if viaRoot {
		if err := conn.QueryRow(ctx, `SELECT NOT pubviaroot FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&turnOn); err != nil {
			return nil, explain(cfg, err)
		}
	}
	var stmts []string
	if turnOn {
		// A partitioned table added makes the publication publish its
		// children's rows as its own.
		stmts = append(stmts, "ALTER PUBLICATION "+pub+" SET (publish_via_partition_root = true)")
	}
	if len(add) > 0 {
		stmts = append(stmts, "ALTER PUBLICATION "+pub+" ADD TABLE "+quotedList(add))
	}
	if len(swapped) > 0 {
		stmts = append(stmts, "ALTER PUBLICATION "+pub+" DROP TABLE "+quotedList(swapped))
	}
	if len(stmts) == 0 {
		return nil, nil
	}
	if err := inOneTransaction(ctx, conn, cfg, stmts); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return unpublishAdded(ctx, cfg, added, swapped, turnOn) }, nil
}

// sameTree are the tables of removed that are of one partition tree with
// a table of fresh and published now: an ancestor or a descendant of
// one (PostgreSQL 12 and later; before, no partitioned table is
// replicated).
func sameTree(ctx context.Context, cat *catalog, cfg Config, removed, fresh []string) ([]string, error) {
	if len(removed) == 0 || len(fresh) == 0 {
		return nil, nil
	}
	conn := cat.conn
	version, err := cat.serverVersion(ctx)
	if err != nil {
		return nil, explain(cfg, err)
	}
	if version < 120000 {
		return nil, nil
	}
	published, err := publicationMembers(ctx, conn, cfg)
	if err != nil {
		return nil, err
	}
	quote := func(ts []string) []string {
		q := make([]string, len(ts))
		for i, t := range ts {
			q[i] = quoteQualified(t)
		}
		return q
	}
	rows, err := conn.Query(ctx, `
SELECT r.i::int FROM unnest($1::text[]) WITH ORDINALITY AS r(name, i)
WHERE EXISTS (SELECT 1 FROM unnest($2::text[]) AS f(name), pg_partition_ancestors(to_regclass(f.name)) a
              WHERE a.relid = to_regclass(r.name) AND a.relid <> to_regclass(f.name))
   OR EXISTS (SELECT 1 FROM pg_partition_ancestors(to_regclass(r.name)) a, unnest($2::text[]) AS f(name)
              WHERE a.relid = to_regclass(f.name) AND a.relid <> to_regclass(r.name))`, quote(removed), quote(fresh))
	if err != nil {
		return nil, explain(cfg, err)
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, explain(cfg, err)
	}
	var out []string
	for _, i := range idx {
		t := removed[i-1]
		if slices.ContainsFunc(published, func(m publicationMember) bool { return m.name == t }) {
			out = append(out, t)
		}
	}
	return out, nil
}

// unpublishAdded takes out of the publication the relations added (by
// publishAdded), puts back the tables swapped out for them, and turns
// publish_via_partition_root off again if it turned it on.
func unpublishAdded(ctx context.Context, cfg Config, added []uint32, swapped []string, turnedOn bool) error {
	return changeMembers(ctx, cfg, func(members []publicationMember) []string {
		var drop []string
		for _, m := range members {
			if slices.Contains(added, m.oid) {
				drop = append(drop, m.name)
			}
		}
		pub := pgx.Identifier{cfg.Publication}.Sanitize()
		var stmts []string
		if len(drop) > 0 {
			stmts = append(stmts, "ALTER PUBLICATION "+pub+" DROP TABLE "+quotedList(drop))
		}
		if len(swapped) > 0 {
			stmts = append(stmts, "ALTER PUBLICATION "+pub+" ADD TABLE "+quotedList(swapped))
		}
		if turnedOn {
			stmts = append(stmts, "ALTER PUBLICATION "+pub+" SET (publish_via_partition_root = false)")
		}
		return stmts
	})
}

// changeMembers runs, in one transaction on a connection of its own, the
// statements stmts makes of the relations the publication names now.
func changeMembers(ctx context.Context, cfg Config, stmts func([]publicationMember) []string) error {
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer cat.Close()
	members, err := publicationMembers(ctx, cat.conn, cfg)
	if err != nil {
		return err
	}
	return inOneTransaction(ctx, cat.conn, cfg, stmts(members))
}

// publicationKeep is what the publication keeps after a change: the
// changefeed's tables, by name and by relation (a table renamed upstream
// and not followed yet is published under its new name).
type publicationKeep struct {
	names map[string]bool
	rels  map[uint32]bool
}

// dropped are the members that keep does not keep.
func (keep publicationKeep) dropped(members []publicationMember) []publicationMember {
	var drop []publicationMember
	for _, m := range members {
		if !keep.names[m.name] && !keep.rels[m.oid] {
			drop = append(drop, m)
		}
	}
	return drop
}

// publicationKeeps is what the publication keeps for a changefeed of
// tables whose resume point is p.
func publicationKeeps(tables []string, p position) publicationKeep {
	k := publicationKeep{names: map[string]bool{}, rels: map[uint32]bool{}}
	for _, t := range tables {
		k.names[t] = true
		if oid := p.Tables[t].OID; oid != 0 {
			k.rels[oid] = true
		}
	}
	return k
}

// trimPublication takes out of the publication every relation it holds
// that keep does not: the tables a stored change removed, a table copied
// again's old relation renamed away (its WAL decoded for nothing), and
// what a change whose Finish never ran (its coordinator stopped) left.
func trimPublication(ctx context.Context, cfg Config, keep publicationKeep) error {
	return changeMembers(ctx, cfg, func(members []publicationMember) []string {
		var drop []string
		for _, m := range keep.dropped(members) {
			drop = append(drop, m.name)
		}
		if len(drop) == 0 {
			return nil
		}
		return []string{"ALTER PUBLICATION " + pgx.Identifier{cfg.Publication}.Sanitize() + " DROP TABLE " + quotedList(drop)}
	})
}

// publicationMember is a relation a publication names.
type publicationMember struct {
	name string
	oid  uint32
}

// publicationMembers are the relations the publication names itself
// (pg_publication_rel): not the tables it sends, which hide a partition
// whose root it names too under publish_via_partition_root.
func publicationMembers(ctx context.Context, conn *pgx.Conn, cfg Config) ([]publicationMember, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname::text, c.relname::text, c.oid::int8
FROM pg_publication_rel pr
JOIN pg_publication pb ON pb.oid = pr.prpubid
JOIN pg_class c ON c.oid = pr.prrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE pb.pubname = $1`, cfg.Publication)
	if err != nil {
		return nil, explain(cfg, err)
	}
	members, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (publicationMember, error) {
		var schema, name string
		var oid int64
		err := r.Scan(&schema, &name, &oid)
		return publicationMember{name: model.TableName(schema, name), oid: uint32(oid)}, err
	})
	if err != nil {
		return nil, explain(cfg, err)
	}
	return members, nil
}

// inOneTransaction runs statements that change the publication together.
func inOneTransaction(ctx context.Context, conn *pgx.Conn, cfg Config, stmts []string) error {
	if len(stmts) == 0 {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return explain(cfg, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w; the user must own the tables, or be a superuser", q, explain(cfg, err))
		}
	}
	return tx.Commit(ctx)
}

func quotedList(tables []string) string {
	q := make([]string, len(tables))
	for i, t := range tables {
		// The table alone, not its inheritance children (inherited.go),
		// which would be published with it, and taken out of the
		// publication with it though replicated as tables of their own.
		// A partitioned table's partitions come with it all the same.
		q[i] = "ONLY " + quoteQualified(t)
	}
	return strings.Join(q, ", ")
}
