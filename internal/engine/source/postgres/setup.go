package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Upstream is what Prepare found and made ready on the upstream.
type Upstream struct {
	// StartLSN is where the slot begins: the changefeed replicates every
	// transaction that commits after it.
	StartLSN pglogrepl.LSN
	// Defs are the replicated tables' definitions, by "schema.table";
	// OIDs, their relations.
	Defs map[string]*source.TableDef
	OIDs map[string]uint32
	// Nums are the tables' columns' attribute numbers, in Defs' order
	// (nil where the catalog changed while they were read).
	Nums map[string][]int16
	// CreatedSlot is true when this call created the slot.
	CreatedSlot bool
	// Parts are the tables' partition trees (position.Parts): every
	// relation in them now is in the snapshot. Nil where they could not
	// be read.
	Parts map[string][]uint32
	// Labels are the database's enum values' labels, read after the
	// slot is made (position.Labels), at LabelsAt; nil where they could
	// not be read.
	Labels   map[uint32]enumLabel
	LabelsAt int64
}

// Prepare checks that the upstream can be replicated as configured and
// creates the publication and the slot when they are missing. Every
// refusal carries PostgreSQL's reason and what to do; nothing is created
// when a check fails.
func Prepare(ctx context.Context, cfg Config) (Upstream, error) {
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return Upstream{}, explain(cfg, err)
	}
	defer cat.Close()
	if err := preflight(ctx, cat, cfg); err != nil {
		return Upstream{}, err
	}
	up := Upstream{Defs: map[string]*source.TableDef{}, OIDs: map[string]uint32{}, Nums: map[string][]int16{}}
	for _, t := range cfg.Tables {
		def, err := checkTable(ctx, cat, cfg, t)
		if err != nil {
			return Upstream{}, err
		}
		up.Defs[t] = def
		if up.OIDs[t], err = cat.oidOf(ctx, t); err != nil {
			return Upstream{}, explain(cfg, err)
		}
		if up.Nums[t], err = cat.nums(ctx, up.OIDs[t], def); err != nil {
			return Upstream{}, explain(cfg, err)
		}
	}
	if err := ensurePublication(ctx, cat.conn, cfg); err != nil {
		return Upstream{}, err
	}
	lsn, created, err := ensureSlot(ctx, cat.conn, cfg)
	if err != nil {
		return Upstream{}, err
	}
	up.StartLSN, up.CreatedSlot = lsn, created
	if cfg.Snapshot != "never" {
		// Read after the slot is made: a partition attached before is
		// in the snapshot, one attached after is new to the first look.
		up.Parts, _ = treesOf(ctx, cat, cfg.Tables)
	}
	// After the slot too: a value renamed after this is in the stream's
	// future, and the reader's first look sees it renamed.
	up.Labels, up.LabelsAt, _ = readEnumLabels(ctx, cat.conn)
	// From the slot's start, where the user may make it; the reader tries
	// again when it starts, and logs why it cannot (postgres.md).
	_, _ = ensureRewriteTrigger(ctx, cat.conn, cfg)
	return up, nil
}

// preflight checks the server settings and the user's rights.
func preflight(ctx context.Context, cat *catalog, cfg Config) error {
	var walLevel string
	if err := cat.conn.QueryRow(ctx, `SHOW wal_level`).Scan(&walLevel); err != nil {
		return explain(cfg, err)
	}
	if cfg.Snapshot == "initial" {
		var version int
		if err := cat.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return explain(cfg, err)
		}
		if version < 140000 {
			return fmt.Errorf("the initial snapshot needs PostgreSQL 14 or later (this is %d.%d): upgrade, or add snapshot=never to the source URI to replicate only changes from now on", version/10000, version%10000)
		}
	}
	if walLevel != "logical" {
		return fmt.Errorf("PostgreSQL's wal_level is %q; logical replication needs wal_level = logical: set it in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel)
	}
	var user string
	var mayReplicate bool
	if err := cat.conn.QueryRow(ctx, `SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &mayReplicate); err != nil {
		return explain(cfg, err)
	}
	if !mayReplicate {
		return fmt.Errorf("PostgreSQL user %q may not replicate: grant it with ALTER ROLE %s REPLICATION (or connect as a superuser)", user, user)
	}
	return nil
}

// ensurePublication creates the publication for the tables, or checks
// that an existing one publishes all of them.
func ensurePublication(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&exists); err != nil {
		return explain(cfg, err)
	}
	roots, err := partitionRoots(ctx, conn, cfg)
	if err != nil {
		return err
	}
	if !exists {
		quoted := make([]string, len(cfg.Tables))
		for i, t := range cfg.Tables {
			quoted[i] = "ONLY " + quoteQualified(t) // inherited.go
		}
		// A partitioned table's children, present and future, publish
		// their rows as the root's (PostgreSQL 13 and later): the
		// changefeed replicates the table the operator named.
		with := ""
		if len(roots) > 0 {
			with = " WITH (publish_via_partition_root = true)"
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s%s", pgx.Identifier{cfg.Publication}.Sanitize(), strings.Join(quoted, ", "), with))
		if err != nil {
			return fmt.Errorf("create publication %s: %w; the user must own the tables and may create in the database (GRANT CREATE ON DATABASE ... TO the user), or be a superuser; or create it yourself: CREATE PUBLICATION %s FOR TABLE %s%s", cfg.Publication, explain(cfg, err), cfg.Publication, strings.Join(quoted, ", "), with)
		}
		return nil
	}
	if why, err := publicationUnfit(ctx, conn, cfg); err != nil {
		return explain(cfg, err)
	} else if why != "" {
		return errors.New(why)
	}
	if why, err := notViaRoot(ctx, conn, cfg, roots); err != nil {
		return explain(cfg, err)
	} else if why != "" {
		return errors.New(why + ", or name another publication with publication=")
	}
	published, err := publishedTables(ctx, conn, cfg)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, t := range published {
		has[t] = true
	}
	var missing []string
	for _, t := range cfg.Tables {
		if !has[t] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("publication %s exists but does not publish %s: ALTER PUBLICATION %s ADD TABLE %s, or name another publication with publication=", cfg.Publication, strings.Join(missing, ", "), cfg.Publication, quotedList(missing))
	}
	return nil
}

// notViaRoot says why a publication cannot serve partitioned tables
// (roots): it publishes their rows under the partitions' names.
func notViaRoot(ctx context.Context, conn *pgx.Conn, cfg Config, roots []string) (string, error) {
	if len(roots) == 0 {
		return "", nil
	}
	var viaRoot bool
	if err := conn.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&viaRoot); err != nil {
		return "", err
	}
	if viaRoot {
		return "", nil
	}
	return fmt.Sprintf("publication %s publishes the rows of partitioned table %s under its children's names, which the changefeed does not replicate: ALTER PUBLICATION %s SET (publish_via_partition_root = true)", cfg.Publication, roots[0], cfg.Publication), nil
}

// unpublished warns of what someone changed in the changefeed's
// publication since it was created, which PostgreSQL does not say: a
// table it no longer publishes (ALTER PUBLICATION … DROP TABLE; none of
// its changes come), kinds of change it no longer publishes, rows or
// columns filtered (PostgreSQL 15), a partitioned table's rows published
// under its partitions' names (they were dropped as another table's).
// Nothing when the catalog cannot be asked.
func unpublished(ctx context.Context, conn *pgx.Conn, cfg Config) []string {
	var out []string
	const since = " (changed since the changefeed was created: its changes are being lost; fix the publication, then copy the tables again: pause, update --remove-table, update --add-table, resume)"
	why, err := publicationUnfit(ctx, conn, cfg)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not one table out of it: all of it gone.
		return []string{fmt.Sprintf("publication %s does not exist: it was dropped (DROP PUBLICATION, or DROP OWNED BY the changefeed's user), and PostgreSQL cannot decode the changes after the drop, also once a publication of that name is created again; remove the changefeed and create it again (its tables are copied again)", cfg.Publication)}
	}
	if err == nil && why != "" {
		out = append(out, why+since)
	}
	if roots, err := partitionRoots(ctx, conn, cfg); err == nil {
		if why, err := notViaRoot(ctx, conn, cfg, roots); err == nil && why != "" {
			// (Its membership is then the partitions': not said again.)
			return append(out, why+since)
		}
	}
	published, err := publishedTables(ctx, conn, cfg)
	if err != nil {
		return out
	}
	has := make(map[string]bool, len(published))
	for _, t := range published {
		has[t] = true
	}
	for _, t := range cfg.Tables {
		if has[t] {
			continue
		}
		var exists bool
		if conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoteQualified(t)).Scan(&exists) != nil || !exists {
			continue // dropped: its DROP says so
		}
		out = append(out, fmt.Sprintf("%s is not in publication %s, so PostgreSQL sends none of its changes: add it back (ALTER PUBLICATION %s ADD TABLE ONLY %s), then copy it again, as the changes meanwhile are lost (cdcctl changefeed update --remove-table, then --add-table, while paused)",
			t, cfg.Publication, cfg.Publication, quoteQualified(t)))
	}
	return out
}

// publishedTables are the tables the publication publishes, by their
// names now.
func publishedTables(ctx context.Context, conn *pgx.Conn, cfg Config) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1`, cfg.Publication)
	if err != nil {
		return nil, explain(cfg, err)
	}
	published, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var schema, table string
		err := r.Scan(&schema, &table)
		return model.TableName(schema, table), err
	})
	if err != nil {
		return nil, explain(cfg, err)
	}
	return published, nil
}

// partitionRoots returns the partitioned tables among the changefeed's
// tables. It refuses a table that is a partition of another one of them
// (its rows arrive as the root's, never its own), and a partitioned
// table on a PostgreSQL older than 13 (which cannot publish a child's
// rows as its root's).
func partitionRoots(ctx context.Context, conn *pgx.Conn, cfg Config) ([]string, error) {
	schemas, names := make([]string, len(cfg.Tables)), make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		schemas[i], names[i] = model.SplitTableName(t)
	}
	rows, err := conn.Query(ctx, `
SELECT n.nspname::text, c.relname::text, c.relkind = 'p',
       COALESCE((SELECT array_agg(an.nspname::text ORDER BY a.oid)
                 FROM pg_partition_ancestors(c.oid) p
                 JOIN pg_class a ON a.oid = p.relid AND a.oid <> c.oid
                 JOIN pg_namespace an ON an.oid = a.relnamespace), '{}'),
       COALESCE((SELECT array_agg(a.relname::text ORDER BY a.oid)
                 FROM pg_partition_ancestors(c.oid) p
                 JOIN pg_class a ON a.oid = p.relid AND a.oid <> c.oid), '{}')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE (n.nspname::text, c.relname::text) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, schemas, names)
	if err != nil {
		return nil, explain(cfg, err)
	}
	listed := map[string]bool{}
	for _, t := range cfg.Tables {
		listed[t] = true
	}
	var roots []string
	for rows.Next() {
		var (
			schema, table string
			partitioned   bool
			aSchemas      []string
			aNames        []string
		)
		if err := rows.Scan(&schema, &table, &partitioned, &aSchemas, &aNames); err != nil {
			rows.Close()
			return nil, explain(cfg, err)
		}
		name := model.TableName(schema, table)
		if partitioned {
			roots = append(roots, name)
		}
		for i := range min(len(aSchemas), len(aNames)) {
			if a := model.TableName(aSchemas[i], aNames[i]); listed[a] {
				rows.Close()
				return nil, fmt.Errorf("table %s is a partition of %s, which the changefeed replicates too: its rows arrive as %s's; leave %s out of tables=", name, a, a, name)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, explain(cfg, err)
	}
	if len(roots) > 0 {
		var version int
		if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return nil, explain(cfg, err)
		}
		if version < 130000 {
			return nil, fmt.Errorf("table %s is partitioned; replicating it needs PostgreSQL 13 or later (publish_via_partition_root): upgrade, or name its partitions in tables= instead", roots[0])
		}
	}
	sort.Strings(roots)
	return roots, nil
}

// ensureSlot creates the logical slot, or checks that an existing one is
// free and decodes pgoutput; it returns where the slot begins.
func ensureSlot(ctx context.Context, conn *pgx.Conn, cfg Config) (pglogrepl.LSN, bool, error) {
	var (
		plugin    string
		activePID *int32
		confirmed *string
	)
	err := conn.QueryRow(ctx, `SELECT plugin, active_pid, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot).Scan(&plugin, &activePID, &confirmed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		var lsn string
		if err := conn.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, cfg.Slot).Scan(&lsn); err != nil {
			return 0, false, fmt.Errorf("create replication slot %s: %w", cfg.Slot, explain(cfg, err))
		}
		l, err := pglogrepl.ParseLSN(lsn)
		return l, true, err
	case err != nil:
		return 0, false, explain(cfg, err)
	}
	if plugin != "pgoutput" {
		return 0, false, fmt.Errorf("replication slot %s exists with plugin %s; cdcctl reads pgoutput: name another slot with slot=, or drop it (SELECT pg_drop_replication_slot('%s'))", cfg.Slot, plugin, cfg.Slot)
	}
	if activePID != nil {
		return 0, false, fmt.Errorf("replication slot %s is in use by another consumer (PostgreSQL backend pid %d): stop that consumer, or name another slot with slot=", cfg.Slot, *activePID)
	}
	if confirmed == nil {
		return 0, false, fmt.Errorf("replication slot %s has no confirmed position; drop it (SELECT pg_drop_replication_slot('%s')) and try again", cfg.Slot, cfg.Slot)
	}
	l, err := pglogrepl.ParseLSN(*confirmed)
	return l, false, err
}

// Remove drops the changefeed's slot, and its publication when it is
// one cdcctl named (a publication the operator named may serve others).
func Remove(ctx context.Context, cfg Config) error {
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	var gone *pgconn.PgError
	if errors.As(err, &gone) && gone.Code == "3D000" {
		// The database was dropped, and with it its slots (PostgreSQL
		// refuses to drop a database a slot is on) and publications.
		return nil
	}
	if err != nil {
		return explain(cfg, err)
	}
	defer conn.Close(context.Background())
	// The changefeed's reader stops as it is removed: its walsender may
	// hold the slot a moment longer (object in use); wait for it.
	for attempt := 0; ; attempt++ {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 50 {
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("drop replication slot %s: %w", cfg.Slot, explain(cfg, err))
		}
		break
	}
	if strings.HasPrefix(cfg.Publication, "cdcctl_") {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
			return fmt.Errorf("drop publication %s: %w", cfg.Publication, explain(cfg, err))
		}
	}
	// Last, and not a reason to keep the changefeed: a user that is no
	// longer a superuser cannot drop it (postgres.md says how), and the
	// trigger left marks tables for a slot that no reader reads.
	_ = dropRewriteTrigger(ctx, conn, cfg)
	return nil
}

// terminateHolder ends the backend streaming from the slot and waits
// until the slot is free.
func terminateHolder(ctx context.Context, cfg Config) error {
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, cfg.Slot); err != nil {
		return explain(cfg, err)
	}
	for i := 0; i < 50; i++ {
		var active bool
		if err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot).Scan(&active); err != nil {
			return explain(cfg, err)
		}
		if !active {
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the slot is still held after its holder was terminated")
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func quoteQualified(t string) string {
	schema, table := model.SplitTableName(t)
	return pgx.Identifier{schema, table}.Sanitize()
}
