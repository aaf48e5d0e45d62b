package postgres

// ALTER COLUMN … TYPE with USING can give every row a new value and keep
// the column's type (TYPE text USING upper(note) on a text column, TYPE
// numeric(10,2) USING price * 1.1 on that type): PostgreSQL rewrites the
// table, writes none of those rows to the WAL, and describes the table
// to the stream as before. Neither the stream nor the catalog's columns
// tell (versions.go sees a type that changed; again.go). An event
// trigger does: PostgreSQL runs a table_rewrite trigger inside the
// ALTER's transaction, before the rewrite, with the table and the
// reason. A changefeed created by a superuser gets one (its slot's name
// with _rewrites), whose function writes a mark of the table into the
// WAL in that transaction when a column's values are rewritten; the
// stream meets it at the ALTER's commit and copies the table again from
// there, as it does one an enum's renamed value changed (relabel.go).
// Rewrites that keep every value (VACUUM FULL, CLUSTER, SET
// TABLESPACE) do not run table_rewrite triggers, nor does SET LOGGED; a
// column added with a volatile DEFAULT is seen by the stream
// (versions.go). The changefeed's removal drops the trigger and its
// function.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/model"
)

// rewriteKind is the kind of a mark of a table whose column values a
// rewrite changed.
const rewriteKind = "rewrite"

// rewriteMark is what the trigger's function writes: the changefeed's
// slot (each changefeed on the database has its own trigger, and every
// reader meets every mark), the relation rewritten and, for a partition,
// its partitioned table's root (the changefeed's table is the root).
type rewriteMark struct {
	Kind string `json:"kind"`
	Slot string `json:"slot"`
	Rel  uint32 `json:"rel"`
	Root uint32 `json:"root"`
}

// againRewritten is why a table a rewrite mark names is copied again.
const againRewritten = "its column values were rewritten by ALTER COLUMN … TYPE … USING (an event trigger's mark)"

// rewriteTrigger names the changefeed's event trigger and its function:
// its slot's name with _rewrites, within PostgreSQL's 63 bytes (a longer
// one would be cut, and two long slot names alike in their first bytes
// would share one trigger; the slot's hash tells them apart).
func rewriteTrigger(cfg Config) string {
	if name := cfg.Slot + "_rewrites"; len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Slot))
	return fmt.Sprintf("%s_%08x_rewrites", cfg.Slot[:40], h.Sum32())
}

// rewritesUnseen is changefeed get's warning for a changefeed without
// its trigger on a server that could run one, or "".
func rewritesUnseen(ctx context.Context, conn *pgx.Conn, cfg Config) string {
	var there bool
	var version int
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1 AND evtenabled <> 'D'), current_setting('server_version_num')::int`, rewriteTrigger(cfg)).Scan(&there, &version); err != nil || there || version < 140000 {
		return ""
	}
	return "a column whose values an ALTER COLUMN … TYPE … USING rewrites under the same type is not seen (the changefeed has no event trigger " + rewriteTrigger(cfg) + ": only a superuser can create one, and changefeeds created before cdcctl made them have none): after such an ALTER, copy the table again (pause, changefeed update --copy-table, resume), or create the changefeed as a superuser"
}

// columnRewrite is AT_REWRITE_COLUMN_REWRITE, the reason bit of a
// rewrite that computes columns' values anew (ALTER COLUMN … TYPE).
const columnRewrite = 4

// ensureRewriteTrigger creates the changefeed's table_rewrite trigger
// where the user may (a superuser) and the server's pgoutput carries
// messages (PostgreSQL 14 and later). It says whether the trigger is
// there. The function catches its own errors: a mark it cannot write
// must not fail the operator's ALTER.
func ensureRewriteTrigger(ctx context.Context, conn *pgx.Conn, cfg Config) (bool, error) {
	var super bool
	var version int
	if err := conn.QueryRow(ctx, `SELECT rolsuper, current_setting('server_version_num')::int FROM pg_roles WHERE rolname = current_user`).Scan(&super, &version); err != nil {
		return false, err
	}
	if !super || version < 140000 {
		return false, nil
	}
	name := pgx.Identifier{"public", rewriteTrigger(cfg)}.Sanitize()
	// The slot's name is the only text spliced into the function: it is
	// written as a literal, quoted as one.
	slot := "'" + strings.ReplaceAll(cfg.Slot, "'", "''") + "'"
	body := fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $f$
BEGIN
	IF pg_event_trigger_table_rewrite_reason() & %d <> 0 THEN
		PERFORM pg_logical_emit_message(true, '%s', json_build_object('kind', '%s', 'slot', %s,
			'rel', pg_event_trigger_table_rewrite_oid()::int8,
			'root', coalesce(pg_partition_root(pg_event_trigger_table_rewrite_oid())::int8, 0))::text);
	END IF;
EXCEPTION WHEN OTHERS THEN
	RAISE WARNING 'cdcctl: the changefeed of slot %% cannot mark a table rewritten: %%', %s, SQLERRM;
END $f$`, name, columnRewrite, markPrefix, rewriteKind, slot, slot)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, body); err != nil {
		return false, err
	}
	trigger := pgx.Identifier{rewriteTrigger(cfg)}.Sanitize()
	if _, err := tx.Exec(ctx, `DROP EVENT TRIGGER IF EXISTS `+trigger); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `CREATE EVENT TRIGGER `+trigger+` ON table_rewrite EXECUTE FUNCTION `+name+`()`); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// dropRewriteTrigger drops the changefeed's trigger and function, if
// they are there.
func dropRewriteTrigger(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	var there bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1)`, rewriteTrigger(cfg)).Scan(&there); err != nil || !there {
		return err
	}
	if _, err := conn.Exec(ctx, `DROP EVENT TRIGGER IF EXISTS `+pgx.Identifier{rewriteTrigger(cfg)}.Sanitize()); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `DROP FUNCTION IF EXISTS `+pgx.Identifier{"public", rewriteTrigger(cfg)}.Sanitize()+`()`)
	return err
}

// rewriteMarked takes a mark of a table rewritten met in the open
// transaction: the changefeed's table it names (the relation, or its
// root) is copied again from here, as relabelMarked's are. It says
// whether content was such a mark (none goes on to the partitions).
func (s *Stream) rewriteMarked(content []byte) bool {
	if !strings.Contains(string(content), rewriteKind) {
		return false
	}
	var m rewriteMark
	if err := json.Unmarshal(content, &m); err != nil || m.Kind != rewriteKind {
		return false
	}
	if m.Slot != s.cfg.Slot {
		return true // another changefeed's, on the same database
	}
	for name, st := range s.tables {
		if st.OID == 0 || st.OID != m.Rel && st.OID != m.Root {
			continue
		}
		_, held := s.held[name]
		_, gone := s.gone[name]
		if held || gone || s.unread(st) || slices.ContainsFunc(s.again, func(a copyAgain) bool { return a.Table == name }) {
			continue
		}
		s.again = append(s.again, copyAgain{Table: name, OID: st.OID, At: s.base + model.Ts(len(s.ddls)), Why: againRewritten})
	}
	return true
}
