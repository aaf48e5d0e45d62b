package postgres

// PostgreSQL describes a relation to the reader (a Relation message) only
// before the first row of it the stream carries after a change: a
// column's type changed, added or dropped on a table nobody writes to
// afterwards reached neither the sink's schema nor, where the change
// rewrote the values (ALTER COLUMN … TYPE … USING, a numeric's scale),
// its rows: the sink kept the old values for as long as the table stayed
// idle. The reader's look at the catalog (every catalog-interval) now
// compares each table's columns, as pgoutput would describe them, with
// the stream's last description; where they differ it writes a mark of
// the catalog's description into the WAL (a logical message naming its
// slot). The stream meets the mark in its place and takes it as the
// Relation message PostgreSQL would have sent there: a schema change at
// the mark's own position, the table copied again where its values were
// rewritten (versions.go, again.go), as for a table written again. The
// tables are read again under a lock for the moment the marks are
// written, so a mark is never older than a Relation message the stream
// meets before it: one met before leaves the mark nothing to change, and
// one met after it changes nothing. The mark is in the WAL, and what it
// changes is decided against the table's definition there, so a reader
// started again from before it meets it at the same place with the same
// outcome: positions do not depend on when the look ran.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/model"
)

// relationKind is the kind of a mark of a relation's description.
const relationKind = "relation"

// relationMark is a relation as pgoutput would describe it now.
type relationMark struct {
	markHead
	Table string    `json:"table"`
	Rel   uint32    `json:"rel"`
	Ident string    `json:"ident"` // relreplident: d, f, i or n
	Cols  []markCol `json:"cols"`
}

// markCol is one column of a relationMark. TypeName is a type of the
// database's own (an enum, a domain) as pgoutput's Type message would
// name it before the relation: its name then, which the catalog may not
// keep.
type markCol struct {
	Name     string `json:"name"`
	Type     uint32 `json:"type"`
	Mod      int32  `json:"mod"`
	Key      bool   `json:"key,omitempty"`
	TypeName string `json:"type_name,omitempty"`
}

// firstUserOID is PostgreSQL's FirstNormalObjectId: types from it on
// are the database's own, which pgoutput names in a Type message.
const firstUserOID = 16384

// message is the Relation message the mark stands for.
func (m relationMark) message() *pglogrepl.RelationMessage {
	schema, name := model.SplitTableName(m.Table)
	msg := &pglogrepl.RelationMessage{RelationID: m.Rel, Namespace: schema, RelationName: name, ColumnNum: uint16(len(m.Cols))}
	if m.Ident != "" {
		msg.ReplicaIdentity = m.Ident[0]
	}
	for _, c := range m.Cols {
		col := &pglogrepl.RelationMessageColumn{Name: c.Name, DataType: c.Type, TypeModifier: c.Mod}
		if c.Key {
			col.Flags = 1
		}
		msg.Columns = append(msg.Columns, col)
	}
	return msg
}

// idleLook is the state of the looks for columns changed on idle tables.
type idleLook struct {
	// after is where the WAL ended at the first look: the stream's
	// descriptions are compared only once it has read that far.
	after pglogrepl.LSN
	// written are the descriptions marked in this run, by relation: one
	// is not marked twice while it travels through the stream.
	written map[uint32]string
	// next is the relation the next look starts at: a look reads at
	// most idleBatch tables, the next one the following ones.
	next uint32
	// denied are the tables the user may not lock, told once a run.
	denied map[uint32]bool
}

// idleBatch bounds the tables one look reads: a changefeed of 100,000
// tables reads them all in 50 looks (8 minutes at the default interval)
// rather than half a million catalog rows every 10 seconds.
const idleBatch = 2_000

// describe reads how pgoutput would describe the relations of tables
// now (by relation id): their columns but dropped and generated ones and
// those a column list of the publication leaves out, a column of the
// replica identity flagged. A relation whose name is no longer its
// table's is left out (a rename: holds.go's looks find it).
func describe(ctx context.Context, conn interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, version int, publication string, tables map[uint32]string) (map[uint32]relationMark, error) {
	oids := make([]uint32, 0, len(tables))
	for oid := range tables {
		oids = append(oids, oid)
	}
	generated, columnList := "", ""
	if version >= 120000 {
		generated = " AND a.attgenerated = ''"
	}
	if version >= 150000 {
		columnList = ` AND NOT EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
			WHERE p.pubname = $2 AND pr.prrelid = c.oid AND pr.prattrs IS NOT NULL AND NOT a.attnum = ANY(pr.prattrs::int2[]))`
	}
	// ($2, the publication, is named before 15 too: a parameter the
	// query does not use has no type.)
	rows, err := conn.Query(ctx, `SELECT c.oid::int8, n.nspname, c.relname, c.relreplident::text, a.attname, a.atttypid::int8, a.atttypmod, t.typname::text,
		CASE c.relreplident WHEN 'f' THEN true
			WHEN 'd' THEN a.attnum = ANY(COALESCE((SELECT (string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts] FROM pg_index i
				WHERE i.indrelid = c.oid AND i.indisprimary AND i.indimmediate AND i.indisvalid LIMIT 1), '{}'))
			WHEN 'i' THEN a.attnum = ANY(COALESCE((SELECT (string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts] FROM pg_index i
				WHERE i.indrelid = c.oid AND i.indisreplident AND i.indimmediate AND i.indisvalid LIMIT 1), '{}'))
			ELSE false END
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped`+generated+`
		JOIN pg_type t ON t.oid = a.atttypid
		WHERE c.oid = ANY($1::oid[]) AND $2::text IS NOT NULL`+columnList+`
		ORDER BY c.oid, a.attnum`, oids, publication)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uint32]relationMark{}
	for rows.Next() {
		var (
			oid                          int64
			schema, name, ident, typName string
			col                          markCol
			typ                          int64
		)
		if err := rows.Scan(&oid, &schema, &name, &ident, &col.Name, &typ, &col.Mod, &typName, &col.Key); err != nil {
			return nil, err
		}
		if typ >= firstUserOID {
			col.TypeName = typName
		}
		rel := uint32(oid)
		if model.TableName(schema, name) != tables[rel] {
			continue
		}
		col.Type = uint32(typ)
		m := out[rel]
		m.Kind, m.Table, m.Rel, m.Ident = relationKind, tables[rel], rel, ident
		m.Cols = append(m.Cols, col)
		out[rel] = m
	}
	return out, rows.Err()
}

// lookForIdleChanges marks the tables whose columns the catalog
// describes otherwise than the stream last did. A failed look is told
// and made again at the next. Before PostgreSQL 14 pgoutput sends no
// logical messages, so no mark would come back: it does not look.
func (s *Source) lookForIdleChanges(ctx context.Context, st *Stream, l *idleLook, at pglogrepl.LSN) {
	if !st.ticks {
		return
	}
	conn := st.cat.conn
	if l.after == 0 {
		lsn, err := walEnd(ctx, conn)
		if err != nil {
			s.log.Warn("postgres source: cannot look for columns changed on tables nobody writes to; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		}
		l.after = lsn
		return
	}
	if at < l.after {
		return
	}
	version, err := st.cat.serverVersion(ctx)
	if err != nil {
		s.log.Warn("postgres source: cannot look for columns changed on tables nobody writes to; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	all := map[uint32]string{}
	for name, ts := range st.tables {
		if _, held := st.held[name]; ts.OID != 0 && ts.Def != nil && !held && !st.unread(ts) {
			if _, gone := st.gone[name]; !gone {
				all[ts.OID] = name
			}
		}
	}
	if len(all) == 0 {
		return
	}
	oids := slices.Sorted(maps.Keys(all))
	from, _ := slices.BinarySearch(oids, l.next)
	if from == len(oids) {
		from = 0
	}
	tables := map[uint32]string{}
	for _, oid := range oids[from:min(from+idleBatch, len(oids))] {
		tables[oid] = all[oid]
	}
	now, err := describe(ctx, conn, version, s.cfg.Publication, tables)
	if err != nil {
		s.log.Warn("postgres source: cannot look for columns changed on tables nobody writes to; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	if from+idleBatch < len(oids) {
		l.next = oids[from+idleBatch]
	} else {
		l.next = 0
	}
	var differ []uint32
	for rel, m := range now {
		if !st.describedOtherwise(ctx, m) {
			delete(l.written, rel)
		} else if l.written[rel] != m.signature() {
			differ = append(differ, rel)
		}
	}
	slices.Sort(differ)
	for len(differ) > 0 {
		n := min(len(differ), marksPerTxn)
		batch := map[uint32]string{}
		for _, rel := range differ[:n] {
			batch[rel] = tables[rel]
		}
		differ = differ[n:]
		marked, err := s.markRelations(ctx, st, l, version, batch)
		if err != nil {
			s.log.Warn("postgres source: cannot mark columns changed on tables nobody writes to; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
			return
		}
		for _, m := range marked {
			s.log.Info("postgres source: a table's columns in the catalog differ from what the stream last said of them (changed, and not written since); the change is taken from the catalog in its place", "changefeed", s.cf, "table", m.Table)
		}
	}
}

// marksPerTxn bounds the marks one transaction carries: each may be a
// schema change, and a table has room for ddlSlots of them in one
// transaction.
const marksPerTxn = 32

// signature tells one description from another.
func (m relationMark) signature() string {
	b, _ := json.Marshal(m.Cols)
	return m.Ident + string(b)
}

// markRelations writes, in one transaction, a mark of each table of
// batch whose columns the catalog still describes otherwise than the
// stream, read again under an ACCESS SHARE lock of the tables (NOWAIT:
// an ALTER under way, or queued, leaves them to the next look). The lock
// keeps any ALTER of them either before the mark, and seen by its read,
// or after it in the WAL: a Relation message the stream meets before a
// mark is never newer than the mark.
func (s *Source) markRelations(ctx context.Context, st *Stream, l *idleLook, version int, batch map[uint32]string) ([]relationMark, error) {
	tx, err := st.cat.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit, a no-op
	// Each table alone (ONLY: not a partitioned table's partitions, which
	// an ALTER of it locks through it), under a savepoint: one an ALTER
	// holds or awaits, or one dropped meanwhile, is left to the next look
	// and the others go on.
	locked := map[uint32]string{}
	for _, rel := range slices.Sorted(maps.Keys(batch)) {
		if _, err := tx.Exec(ctx, `SAVEPOINT cdcctl_look`); err != nil {
			return nil, err
		}
		_, err := tx.Exec(ctx, `LOCK TABLE ONLY `+quoteQualified(batch[rel])+` IN ACCESS SHARE MODE NOWAIT`)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			locked[rel] = batch[rel]
		case errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "42P01" || pgErr.Code == "42501"):
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT cdcctl_look`); err != nil {
				return nil, err
			}
			if pgErr.Code == "42501" && !l.denied[rel] {
				// (A changefeed with snapshot=never needs no SELECT on its
				// tables; the lock does.) Told once a run.
				if l.denied == nil {
					l.denied = map[uint32]bool{}
				}
				l.denied[rel] = true
				s.log.Warn("postgres source: a table's columns in the catalog differ from what the stream last said of them, and the changefeed's user may not lock it to take the change in its place (it needs SELECT on the table); the change reaches the sink with the table's next row", "changefeed", s.cf, "table", batch[rel], "err", pgErr.Message)
			}
		default:
			return nil, err
		}
	}
	if len(locked) == 0 {
		return nil, nil
	}
	now, err := describe(ctx, tx, version, s.cfg.Publication, locked)
	if err != nil {
		return nil, err
	}
	var marks []relationMark
	for _, rel := range slices.Sorted(maps.Keys(now)) {
		m := now[rel]
		if !st.describedOtherwise(ctx, m) {
			continue
		}
		m.Slot = s.cfg.Slot
		b, _ := json.Marshal(m)
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b)); err != nil {
			return nil, err
		}
		marks = append(marks, m)
	}
	if len(marks) == 0 {
		return nil, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	if l.written == nil {
		l.written = map[uint32]string{}
	}
	for _, m := range marks {
		l.written[m.Rel] = m.signature()
	}
	return marks, nil
}

// describedOtherwise says whether the stream's last description of the
// mark's table differs from it: its last Relation message's columns, or,
// with none in this run, the table's definition (names and types). It
// only decides whether to write a mark: the stream's reading of the
// mark decides from the table's definition alone (relationMarked).
func (s *Stream) describedOtherwise(ctx context.Context, m relationMark) bool {
	if rel := s.rels[m.Rel]; rel != nil {
		if rel.foreign || rel.gone || rel.held {
			return false
		}
		return !sameDescription(rel.cols, m)
	}
	st := s.tables[m.Table]
	if st == nil || st.Def == nil {
		return false
	}
	if len(st.Def.Columns) != len(m.Cols) {
		return true
	}
	for i, c := range st.Def.Columns {
		if c.Name != m.Cols[i].Name {
			return true
		}
		if typ, err := s.cat.typeName(ctx, m.Cols[i].Type, m.Cols[i].Mod); err != nil || typ != c.Type {
			return true
		}
	}
	return false
}

// sameDescription says whether a Relation message's columns are the
// mark's.
func sameDescription(cols []*pglogrepl.RelationMessageColumn, m relationMark) bool {
	if len(cols) != len(m.Cols) {
		return false
	}
	for i, c := range cols {
		mc := m.Cols[i]
		if c.Name != mc.Name || c.DataType != mc.Type || c.TypeModifier != mc.Mod || (c.Flags&1 != 0) != mc.Key {
			return false
		}
	}
	return true
}

// relationMarked takes a mark of a relation's description met in the
// open transaction: this changefeed's is the Relation message PostgreSQL
// would have sent there, and what it changes is decided against the
// table's definition (Stream.relation), so a stream read again from
// before it decides the same. Where it changes nothing, the relation's
// columns stay those of its last Relation message, by which rows are
// decoded. It says whether content was such a mark (none goes on to the
// partitions).
func (s *Stream) relationMarked(ctx context.Context, content []byte) (bool, error) {
	var m relationMark
	if ok, mine := s.readMark(content, relationKind, &m); !ok || !mine {
		return ok, nil // not one; or another changefeed's, on the same database
	}
	st := s.tables[m.Table]
	if st == nil || st.OID != m.Rel || len(m.Cols) == 0 {
		return true, nil
	}
	for _, c := range m.Cols {
		if c.TypeName != "" {
			s.cat.nameType(c.Type, c.TypeName) // as a Type message would
		}
	}
	prev := s.rels[m.Rel]
	_, wasHeld := s.held[m.Table]
	ddls, again := len(s.ddls), len(s.again)
	if err := s.relation(ctx, m.message()); err != nil {
		return true, err
	}
	if _, held := s.held[m.Table]; len(s.ddls) == ddls && len(s.again) == again && held == wasHeld {
		if prev != nil {
			s.rels[m.Rel] = prev
		} else {
			delete(s.rels, m.Rel)
		}
	}
	return true, nil
}
