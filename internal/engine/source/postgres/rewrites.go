package postgres

// ALTER COLUMN … TYPE with USING can give every row a new value and keep
// the column's type (TYPE text USING upper(note) on a text column, TYPE
// numeric(10,2) USING price * 1.1 on that type): PostgreSQL rewrites the
// table, writes none of those rows to the WAL, and describes the table
// to the stream as before. Neither the stream nor the catalog's columns
// tell (versions.go sees a type that changed; again.go). An event
// trigger does: PostgreSQL runs a table_rewrite trigger inside the
// ALTER's transaction, before the rewrite, with the table and the
// reason. A changefeed whose user is a superuser gets one (its slot's
// name with _rewrites; made by Prepare, or by its reader when it starts),
// whose function writes a mark of the table into the WAL in that
// transaction when columns' values are computed anew (the reason's bit
// 4: not SET LOGGED, SET ACCESS METHOD, nor a volatile DEFAULT, whose
// column the stream sees added; VACUUM FULL, CLUSTER and SET TABLESPACE
// run no such trigger). The stream meets the mark at the ALTER's commit
// and copies the table again from there, as it does one an enum's
// renamed value changed (relabel.go). The mark carries the table's
// columns after the ALTER: a type change the stream meets later with
// exactly those columns is that ALTER's, copied already. The function
// runs as whoever runs the ALTER (not as its owner: it takes no rights
// of the superuser that made it) with its search path fixed. The same
// function writes the mark of a SET UNLOGGED (the reason's bit 1, on a
// table still logged: unpublished.go), and runs for the changefeed's two
// triggers before and after ALTER PUBLICATION (publicationmarks.go). The
// changefeed's removal drops the three triggers and their function.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// rewriteKind is the kind of a mark of a table whose column values a
// rewrite changed.
const rewriteKind = "rewrite"

// rewriteMark is what the trigger's function writes: the changefeed's
// slot (each changefeed on the database has its own trigger, and every
// reader meets every mark), the relation rewritten with its partitioned
// ancestors (the changefeed's table may be any of them), and its columns
// after the ALTER, each [name, type oid, type modifier], by name.
type rewriteMark struct {
	markHead
	Rels []uint32          `json:"rels"`
	Cols []json.RawMessage `json:"cols"`
}

// columnsOf is a hash of columns' names, types and modifiers, in the
// order of their names, to compare a rewrite mark's with a
// description's (kept in every resume point until then: short).
func columnsOf(cols []rewriteColumn) string {
	slices.SortFunc(cols, func(a, b rewriteColumn) int { return strings.Compare(a.name, b.name) })
	h := sha256.New()
	for _, c := range cols {
		fmt.Fprintf(h, "%s\x00%d\x00%d\x01", c.name, c.typ, c.mod)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// rewriteColumn is one column as a mark and a description give it.
type rewriteColumn struct {
	name string
	typ  uint32
	mod  int32
}

// markedColumns is a mark's columns as columnsOf writes them.
func (m rewriteMark) markedColumns() string {
	cols := make([]rewriteColumn, 0, len(m.Cols))
	for _, raw := range m.Cols {
		var c []any
		if json.Unmarshal(raw, &c) != nil || len(c) != 3 {
			return ""
		}
		name, _ := c[0].(string)
		typ, _ := c[1].(float64)
		mod, _ := c[2].(float64)
		cols = append(cols, rewriteColumn{name: name, typ: uint32(typ), mod: int32(mod)})
	}
	return columnsOf(cols)
}

// describedColumns is a relation message's columns as columnsOf writes
// them.
func describedColumns(m *pglogrepl.RelationMessage) string {
	cols := make([]rewriteColumn, len(m.Columns))
	for i, c := range m.Columns {
		cols[i] = rewriteColumn{name: c.Name, typ: c.DataType, mod: c.TypeModifier}
	}
	return columnsOf(cols)
}

// againRewritten is why a table a rewrite mark names is copied again.
const againRewritten = "its column values were rewritten by ALTER COLUMN … TYPE … USING (an event trigger's mark)"

// rewriteTrigger names the changefeed's table_rewrite trigger and the
// function all its event triggers run: its slot's name with _rewrites.
func rewriteTrigger(cfg Config) string { return eventTrigger(cfg, "rewrites") }

// publicationTriggers name the changefeed's triggers before and after an
// ALTER PUBLICATION (publicationmarks.go).
func publicationTriggers(cfg Config) [2]string {
	return [2]string{eventTrigger(cfg, "pub_before"), eventTrigger(cfg, "pub_after")}
}

// eventTrigger is the name of one of the changefeed's event triggers: its
// slot's name with _suffix, within PostgreSQL's 63 bytes (a longer one
// would be cut, and two long slot names alike in their first bytes would
// share one trigger; the slot's hash tells them apart).
func eventTrigger(cfg Config, suffix string) string {
	if name := cfg.Slot + "_" + suffix; len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Slot))
	return fmt.Sprintf("%s_%08x_%s", cfg.Slot[:40], h.Sum32(), suffix)
}

// rewritesUnseen is changefeed get's warning for a changefeed without
// its triggers on a server that could run them, or "".
func rewritesUnseen(ctx context.Context, conn *pgx.Conn, cfg Config) string {
	t, err := rewriteTriggerState(ctx, conn, cfg)
	if err != nil || t.current() {
		return ""
	}
	if t.version < 140000 {
		return rewritesUnseenText + "; " + publicationUnseenText + ": PostgreSQL 13's pgoutput carries no messages"
	}
	return triggersMissing(t) + "; " + t.why(cfg)
}

// What goes unseen without the changefeed's table_rewrite trigger (its
// same-type rewrites, which an older cdcctl's function marks too, and
// SET UNLOGGED, which it does not), and without its two of ALTER
// PUBLICATION.
const (
	rewritesUnseenText    = "a column whose values an ALTER COLUMN … TYPE … USING rewrites under the same type is not seen (copy such a table again after the ALTER: pause, changefeed update --copy-table, resume)"
	unloggedUnseenText    = "a partition SET UNLOGGED and back between two of the reader's looks at the catalog is not seen"
	publicationUnseenText = "a table taken out of the publication and put back between two of the reader's looks is not seen, and a publication that stops sending a kind of change or filters a table's rows or columns is warned of here, not held"
)

// triggersMissing says what goes unseen with the triggers as they are:
// each missing or off in some sessions, or running an older cdcctl's
// function (whose marks are not all this one's).
func triggersMissing(t triggerState) string {
	var lost []string
	if !t.rewrites {
		lost = append(lost, rewritesUnseenText)
	}
	if !t.rewrites || !t.own {
		lost = append(lost, unloggedUnseenText)
	}
	if !t.pubs || !t.own {
		lost = append(lost, publicationUnseenText)
	}
	return strings.Join(lost, "; ")
}

// enableAll are the statements that turn triggers on in every session.
func enableAll(names []string) string {
	qs := make([]string, len(names))
	for i, n := range names {
		qs[i] = "ALTER EVENT TRIGGER " + pgx.Identifier{n}.Sanitize() + " ENABLE ALWAYS"
	}
	return strings.Join(qs, "; ")
}

// why says why the changefeed's triggers are not as this cdcctl makes
// them, and what to do.
func (t triggerState) why(cfg Config) string {
	switch {
	case len(t.disabled) > 0:
		if len(t.disabled) == 1 {
			return fmt.Sprintf("the changefeed's event trigger %s is disabled (%s turns it on again)", t.disabled[0], enableAll(t.disabled))
		}
		return fmt.Sprintf("the changefeed's event triggers %s are disabled (%s turns them on again)", strings.Join(t.disabled, ", "), enableAll(t.disabled))
	case t.count > 0 && t.count < 3:
		return fmt.Sprintf("%d of the changefeed's 3 event triggers are there (an older cdcctl made %s alone, or some were dropped): the reader makes them anew when it starts, if its user is a superuser", t.count, rewriteTrigger(cfg))
	case t.count == 3:
		pubs := publicationTriggers(cfg)
		return "the changefeed's event triggers are an older cdcctl's, or one runs in some sessions only (ENABLE or ENABLE REPLICA, not ENABLE ALWAYS); the reader makes them anew when it starts if its user is a superuser, or run " + enableAll([]string{rewriteTrigger(cfg), pubs[0], pubs[1]})
	}
	return "the changefeed has no event trigger " + rewriteTrigger(cfg) + " (only a superuser can create one; the changefeed's reader does when it starts, if its user is one, and logs why where it cannot)"
}

// columnRewrite is AT_REWRITE_COLUMN_REWRITE, the reason bit of a
// rewrite that computes columns' values anew (ALTER COLUMN … TYPE);
// persistenceRewrite AT_REWRITE_ALTER_PERSISTENCE, of SET LOGGED and SET
// UNLOGGED.
const (
	columnRewrite      = 4
	persistenceRewrite = 1
)

// ensureRewriteTrigger creates the changefeed's three triggers and their
// function where they are not all there as this cdcctl makes them, the
// user may (a superuser) and the server's pgoutput carries messages
// (PostgreSQL 14 and later). It says whether they are there. The function catches its own errors: a mark it
// cannot write must not fail the operator's ALTER. It is made anew, not
// replaced: CREATE OR REPLACE keeps the owner of a function someone else
// made under the name first, and the trigger would run that owner's body.
func ensureRewriteTrigger(ctx context.Context, conn *pgx.Conn, cfg Config) (bool, error) {
	st, err := rewriteTriggerState(ctx, conn, cfg)
	if err != nil || st.current() {
		return err == nil, err
	}
	if len(st.disabled) > 0 {
		return false, nil // an operator's choice: said, not undone
	}
	if !st.super || st.version < 140000 {
		return false, nil
	}
	name := pgx.Identifier{"public", rewriteTrigger(cfg)}.Sanitize()
	// The slot's and the publication's names are the only text spliced
	// into the function: each is written as a literal, quoted as one. Every name in the body is
	// pg_catalog's: with pg_temp last on the path, no temporary type or
	// table stands for one of them.
	slot := "'" + strings.ReplaceAll(cfg.Slot, "'", "''") + "'"
	pub := "'" + strings.ReplaceAll(cfg.Publication, "'", "''") + "'"
	// Before and after an ALTER PUBLICATION (whichever publication: the
	// trigger cannot tell which before it runs), the relations the
	// changefeed's publication sends, whether it sends a partitioned
	// table's rows under its own name, which changes it sends (publish=),
	// and which relations it sends only some rows or columns of (a row
	// filter or a column list: PostgreSQL 15's columns, read by EXECUTE
	// so that the function, made on 14, goes on after a pg_upgrade).
	body := fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS event_trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
	rel pg_catalog.oid;
	narrowed pg_catalog.json;
BEGIN
	IF TG_EVENT <> 'table_rewrite' THEN
		IF pg_catalog.current_setting('server_version_num')::pg_catalog.int4 >= 150000 THEN
			EXECUTE 'SELECT pg_catalog.json_agg(r.prrelid::pg_catalog.int8) FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
				WHERE p.pubname = $1 AND (r.prqual IS NOT NULL OR r.prattrs IS NOT NULL)' INTO narrowed USING %[7]s::pg_catalog.name;
		END IF;
		PERFORM pg_catalog.pg_logical_emit_message(true, '%[3]s', pg_catalog.json_build_object('kind', '%[6]s', 'slot', %[5]s, 'phase', TG_EVENT,
			'viaroot', (SELECT pubviaroot FROM pg_catalog.pg_publication WHERE pubname = %[7]s),
			'publish', (SELECT pg_catalog.json_build_array(pubinsert, pubupdate, pubdelete, pubtruncate) FROM pg_catalog.pg_publication WHERE pubname = %[7]s),
			'narrowed', narrowed,
			'rels', (SELECT pg_catalog.json_agg(c.oid::pg_catalog.int8) FROM pg_catalog.pg_publication_tables p
				JOIN pg_catalog.pg_namespace n ON n.nspname = p.schemaname JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
				WHERE p.pubname = %[7]s))::pg_catalog.text);
		RETURN;
	END IF;
	rel := pg_catalog.pg_event_trigger_table_rewrite_oid();
	-- SET UNLOGGED (the rewrite of a persistence change, the table still
	-- logged before it): none of its rows reach the WAL from its commit.
	IF pg_catalog.pg_event_trigger_table_rewrite_reason() & %[8]d <> 0 AND (SELECT relpersistence FROM pg_catalog.pg_class WHERE oid = rel) = 'p' THEN
		PERFORM pg_catalog.pg_logical_emit_message(true, '%[3]s', pg_catalog.json_build_object('kind', '%[9]s', 'slot', %[5]s,
			'rel', rel::pg_catalog.int8,
			'name', (SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel),
			'rels', (SELECT pg_catalog.json_agg(r::pg_catalog.oid::pg_catalog.int8) FROM
				(SELECT rel::pg_catalog.regclass AS r UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(rel)) x))::pg_catalog.text);
	END IF;
	IF pg_catalog.pg_event_trigger_table_rewrite_reason() & %[2]d <> 0 THEN
		PERFORM pg_catalog.pg_logical_emit_message(true, '%[3]s', pg_catalog.json_build_object('kind', '%[4]s', 'slot', %[5]s,
			'rels', (SELECT pg_catalog.json_agg(r::pg_catalog.oid::pg_catalog.int8) FROM
				(SELECT rel::pg_catalog.regclass AS r UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(rel)) x),
			'cols', (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(attname, atttypid::pg_catalog.int8, atttypmod) ORDER BY attname)
				FROM pg_catalog.pg_attribute WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped AND attgenerated = ''))::pg_catalog.text);
	END IF;
EXCEPTION WHEN OTHERS THEN
	RAISE WARNING 'cdcctl: the changefeed of slot %% cannot mark a change of its tables: %%', %[5]s, SQLERRM;
END $f$`, name, columnRewrite, markPrefix, rewriteKind, slot, publicationKind, pub, persistenceRewrite, unloggedKind)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	trigger := pgx.Identifier{rewriteTrigger(cfg)}.Sanitize()
	pubs := publicationTriggers(cfg)
	before, after := pgx.Identifier{pubs[0]}.Sanitize(), pgx.Identifier{pubs[1]}.Sanitize()
	// A lock another session holds on a function of the name is waited
	// on a moment, not for ever: the reader calls this as it starts.
	qs := []string{`SET LOCAL lock_timeout = '5s'`}
	qs = append(qs, dropTriggers(cfg)...)
	qs = append(qs, body, `COMMENT ON FUNCTION `+name+`() IS '`+rewriteFunctionVersion+`'`,
		`CREATE EVENT TRIGGER `+trigger+` ON table_rewrite EXECUTE FUNCTION `+name+`()`,
		`CREATE EVENT TRIGGER `+before+` ON ddl_command_start WHEN TAG IN ('ALTER PUBLICATION') EXECUTE FUNCTION `+name+`()`,
		`CREATE EVENT TRIGGER `+after+` ON ddl_command_end WHEN TAG IN ('ALTER PUBLICATION') EXECUTE FUNCTION `+name+`()`)
	for _, t := range []string{trigger, before, after} {
		// In every session, also one in replica mode
		// (session_replication_role = replica, as bulk loads and some
		// migration tools run): a trigger enabled as made runs in
		// origin sessions only, and their rewrites went unseen.
		qs = append(qs, `ALTER EVENT TRIGGER `+t+` ENABLE ALWAYS`)
	}
	for _, q := range qs {
		if _, err := tx.Exec(ctx, q); err != nil {
			return false, err
		}
	}
	return true, tx.Commit(ctx)
}

// rewriteFunctionVersion is the comment on the function this cdcctl
// makes: a trigger whose function has another (an older cdcctl's) is made
// anew, so that its marks are the ones the stream reads.
const rewriteFunctionVersion = "cdcctl rewrite marks 4" // 2: enabled always; 4: and ALTER PUBLICATION's and SET UNLOGGED's marks

// triggerState is what the catalog says of a changefeed's triggers.
type triggerState struct {
	super    bool     // the user is a superuser
	version  int      // server_version_num
	count    int      // how many of its 3 triggers exist
	disabled []string // those turned off: ALTER EVENT TRIGGER … DISABLE
	always   bool     // ENABLE ALWAYS: each runs in every session
	own      bool     // their function is this cdcctl's (rewriteFunctionVersion)
	// rewrites: the table_rewrite trigger is there, on, in every session
	// (an older cdcctl's function marks rewrites too).
	rewrites bool
	pubs     bool // and both of ALTER PUBLICATION
}

// current says the triggers are all there, enabled in every session,
// with this cdcctl's function. Some missing (an older cdcctl made the
// first alone), enabled for some sessions only (ENABLE, what an older
// cdcctl made and its messages said, or ENABLE REPLICA) or with another
// function are made anew, as missing ones are: a disabled one is left as
// it is.
func (t triggerState) current() bool { return t.count == 3 && t.always && t.own }

func rewriteTriggerState(ctx context.Context, conn *pgx.Conn, cfg Config) (triggerState, error) {
	var t triggerState
	pubs := publicationTriggers(cfg)
	err := conn.QueryRow(ctx, `SELECT r.rolsuper, current_setting('server_version_num')::int, count(e.oid)::int,
			coalesce(array_agg(e.evtname::text ORDER BY e.evtname) FILTER (WHERE e.evtenabled = 'D'), '{}'),
			coalesce(bool_and(e.evtenabled = 'A'), false), coalesce(bool_and(coalesce(obj_description(e.evtfoid, 'pg_proc') = $4, false)), false),
			coalesce(bool_or(e.evtname = $1 AND e.evtenabled = 'A'), false),
			count(*) FILTER (WHERE e.evtname IN ($2, $3) AND e.evtenabled = 'A') = 2
		FROM pg_roles r LEFT JOIN pg_event_trigger e ON e.evtname IN ($1, $2, $3) WHERE r.rolname = current_user GROUP BY r.rolsuper`,
		rewriteTrigger(cfg), pubs[0], pubs[1], rewriteFunctionVersion).Scan(&t.super, &t.version, &t.count, &t.disabled, &t.always, &t.own, &t.rewrites, &t.pubs)
	return t, err
}

// dropTriggers are the statements that drop the changefeed's triggers and
// their function, where they are.
func dropTriggers(cfg Config) []string {
	var qs []string
	pubs := publicationTriggers(cfg)
	for _, t := range []string{rewriteTrigger(cfg), pubs[0], pubs[1]} {
		qs = append(qs, `DROP EVENT TRIGGER IF EXISTS `+pgx.Identifier{t}.Sanitize())
	}
	return append(qs, `DROP FUNCTION IF EXISTS `+pgx.Identifier{"public", rewriteTrigger(cfg)}.Sanitize()+`()`)
}

// dropRewriteTrigger drops the changefeed's triggers and their function,
// if they are there.
func dropRewriteTrigger(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	for _, q := range dropTriggers(cfg) {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// rewriteMarked takes a mark of a table rewritten met in the open
// transaction: the changefeed's table it names (the relation, or one of
// its partitioned ancestors) is copied again from here, as
// relabelMarked's are. It says whether content was such a mark (none
// goes on to the partitions).
func (s *Stream) rewriteMarked(content []byte) bool {
	var m rewriteMark
	if ok, mine := s.readMark(content, rewriteKind, &m); !ok || !mine {
		return ok // not one; or another changefeed's, on the same database
	}
	cols := m.markedColumns()
	for name, st := range s.tables {
		if st.OID == 0 || !slices.Contains(m.Rels, st.OID) {
			continue
		}
		_, held := s.held[name]
		_, gone := s.gone[name]
		if held || gone || s.unread(st) {
			continue
		}
		if i := slices.IndexFunc(s.again, func(a copyAgain) bool { return a.Table == name }); i >= 0 {
			// Copied once from the transaction's first mark; the columns
			// are the last ALTER's.
			if s.again[i].Why == againRewritten {
				s.again[i].cols, s.again[i].described = cols, false
			}
			continue
		}
		s.again = append(s.again, copyAgain{Table: name, OID: st.OID, At: s.againAt(name), Why: againRewritten, cols: cols})
	}
	return true
}

// ensureRewrites makes the changefeed's triggers where they are missing
// and says what goes unseen, and why, where they are not all there (""
// when they are). Triggers another reader made meanwhile, failing this
// one's creation, are there.
func (s *Source) ensureRewrites(ctx context.Context, st *Stream) string {
	ok, err := ensureRewriteTrigger(ctx, st.cat.conn, s.cfg)
	if ok {
		return ""
	}
	t, terr := rewriteTriggerState(ctx, st.cat.conn, s.cfg)
	switch {
	case terr == nil && t.current():
		return ""
	case terr != nil:
		return explain(s.cfg, terr).Error()
	case t.version < 140000:
		return rewritesUnseenText + "; " + publicationUnseenText + ": PostgreSQL 13's pgoutput carries no messages"
	case err != nil:
		return triggersMissing(t) + ": " + explain(s.cfg, err).Error()
	case len(t.disabled) == 0 && !t.super:
		return triggersMissing(t) + ": the changefeed's user is not a superuser, and only one may create an event trigger"
	}
	return triggersMissing(t) + ": " + t.why(s.cfg)
}
