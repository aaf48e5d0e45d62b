package postgres

// How a changefeed update changes the publication cdcctl made for the
// changefeed (cdcctl_<changefeed>): it gains the added tables before the
// change is stored in etcd (a stored change never waits for changes that
// are not sent), and they leave it again if the change cannot be stored;
// it loses the tables none of the changefeed's tables is only after the
// change is stored. Taken out first and put back after a change that
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
// on where viaRoot asks for it and it was off, in one transaction. It
// returns what undoes that (nil when nothing changed).
func publishAdded(ctx context.Context, conn *pgx.Conn, cfg Config, fresh []string, oids map[string]uint32, viaRoot bool) (func(context.Context) error, error) {
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
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
	if len(stmts) == 0 {
		return nil, nil
	}
	if err := inOneTransaction(ctx, conn, cfg, stmts); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return unpublishAdded(ctx, cfg, added, turnOn) }, nil
}

// unpublishAdded takes out of the publication the relations added (by
// publishAdded) and turns publish_via_partition_root off again if it
// turned it on.
func unpublishAdded(ctx context.Context, cfg Config, added []uint32, turnedOn bool) error {
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer cat.Close()
	members, err := publicationMembers(ctx, cat.conn, cfg)
	if err != nil {
		return err
	}
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
	if turnedOn {
		stmts = append(stmts, "ALTER PUBLICATION "+pub+" SET (publish_via_partition_root = false)")
	}
	return inOneTransaction(ctx, cat.conn, cfg, stmts)
}

// publicationKeep is what the publication keeps after a change: the
// changefeed's tables, by name and by relation (a table renamed upstream
// and not followed yet is published under its new name).
type publicationKeep struct {
	names map[string]bool
	rels  map[uint32]bool
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
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer cat.Close()
	members, err := publicationMembers(ctx, cat.conn, cfg)
	if err != nil {
		return err
	}
	var drop []string
	for _, m := range members {
		if !keep.names[m.name] && !keep.rels[m.oid] {
			drop = append(drop, m.name)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	return inOneTransaction(ctx, cat.conn, cfg, []string{"ALTER PUBLICATION " + pgx.Identifier{cfg.Publication}.Sanitize() + " DROP TABLE " + quotedList(drop)})
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
