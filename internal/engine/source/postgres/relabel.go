package postgres

// ALTER TYPE … RENAME VALUE changes the text of an enum's value in every
// row that holds it, and writes none of those rows to the WAL: the sink
// kept the old label in every row not written since (for ever on a
// table nobody writes to), and the label no longer exists upstream. The
// reader's catalog look (every catalog-interval) keeps the labels of the
// database's enums and, where a value's label changed, writes a mark
// naming the changefeed's tables with a column of that enum or of a type
// built on it (tablesUsing) into the WAL. The stream meets the mark
// after the rename and copies those tables again from there, as it does
// a table a type change rewrote (again.go): the copy reads every row as
// it is then, with the new label. The labels are the source's, kept
// from one run of its reader to the next, and go with every resume
// point (position.Labels), so that a source opened anew (an agent
// restarted, the changefeed's maintainer on another capture) compares
// its first look with the labels of the look before the point it
// resumes from (takeLabels); a new changefeed's first are read when its
// slot is made (Prepare), before its snapshot reads a row.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// relabelKind is the kind of a mark of enum values renamed.
const relabelKind = "relabel"

// relabelMark names the tables whose rows hold enum values renamed.
type relabelMark struct {
	markHead
	Tables []relabeledTable `json:"tables"`
	Types  []string         `json:"types"` // the enums, for the log
}

// relabeledTable is a table of a relabelMark, with its relation: one
// dropped and created again under the name since is not the one meant.
type relabeledTable struct {
	Table string `json:"table"`
	Rel   uint32 `json:"rel"`
}

// enumLabel is one enum value: its type and label (as a resume point
// keeps it: position.Labels).
type enumLabel struct {
	Type  uint32 `json:"t"`
	Label string `json:"l"`
}

// readEnumLabels reads the label of every enum value of the database, by
// the value's oid (which a rename keeps), and the database's clock just
// before (microseconds since 1970): which of two reads is the newer,
// whichever process made them. pg_enum is small: a few rows per enum,
// however many tables use them.
func readEnumLabels(ctx context.Context, conn *pgx.Conn) (map[uint32]enumLabel, int64, error) {
	var at int64
	if err := conn.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8`).Scan(&at); err != nil {
		return nil, 0, err
	}
	labels, err := enumLabels(ctx, conn)
	return labels, at, err
}

// maxKeptLabels bounds the labels a resume point keeps (position.Labels,
// about 30 bytes a value, written at every checkpoint): a database with
// more enum values keeps none there, and a source opened anew only
// learns them at its first look (postgres.md).
const maxKeptLabels = 2000

// kept is what a resume point keeps of labels.
func kept(labels map[uint32]enumLabel) map[uint32]enumLabel {
	if len(labels) > maxKeptLabels {
		return nil
	}
	return labels
}

// enumLabels reads pg_enum, by value oid.
func enumLabels(ctx context.Context, conn *pgx.Conn) (map[uint32]enumLabel, error) {
	rows, err := conn.Query(ctx, `SELECT oid::int8, enumtypid::int8, enumlabel::text FROM pg_enum`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uint32]enumLabel{}
	for rows.Next() {
		var oid, typ int64
		var label string
		if err := rows.Scan(&oid, &typ, &label); err != nil {
			return nil, err
		}
		out[uint32(oid)] = enumLabel{Type: uint32(typ), Label: label}
	}
	return out, rows.Err()
}

// relabeled returns the enum types a value of which has another label
// now than before. Values added (ALTER TYPE … ADD VALUE) change no row.
func relabeled(before, now map[uint32]enumLabel) []uint32 {
	var types []uint32
	for oid, l := range now {
		if b, ok := before[oid]; ok && b.Label != l.Label && !slices.Contains(types, l.Type) {
			types = append(types, l.Type)
		}
	}
	slices.Sort(types)
	return types
}

// relabelBudget bounds one look's search for the tables of enums
// renamed: the stream waits for it (its standby messages too).
const relabelBudget = 20 * time.Second

// tablesUsing returns those of tables (by relation) with a column whose
// type is one of types, or is built on one: its array, a domain over
// it, a range of it, a composite type (CREATE TYPE … AS) with such a
// field, a table's row type with such a column (a column of type
// "feelings", the table), and so on; those of them with such a column in
// their primary key; and the types' names. It goes a level of types at a
// time, each level one query by the types found so far (pg_type,
// pg_range and the fields of composite types and of relations, none by
// index: a few reads of the catalog, however many tables use the enum).
func tablesUsing(ctx context.Context, conn *pgx.Conn, version int, types []uint32, tables map[uint32]string) (using []relabeledTable, keyed, names []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, relabelBudget)
	defer cancel()
	multirange := ""
	if version >= 140000 {
		multirange = ` UNION SELECT rngmultitypid::int8 FROM pg_range WHERE rngsubtype = ANY($1::oid[])`
	}
	built := slices.Clone(types)
	seen := map[uint32]bool{}
	for _, t := range types {
		seen[t] = true
	}
	for level := types; len(level) > 0; {
		var next []uint32
		rows, err := conn.Query(ctx, `SELECT oid::int8 FROM pg_type WHERE typelem = ANY($1::oid[]) OR typbasetype = ANY($1::oid[])
			UNION SELECT c.reltype::int8 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
				WHERE a.atttypid = ANY($1::oid[]) AND c.relkind IN ('c', 'r', 'p', 'f', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped
			UNION SELECT rngtypid::int8 FROM pg_range WHERE rngsubtype = ANY($1::oid[])`+multirange, level)
		if err != nil {
			return nil, nil, nil, err
		}
		for rows.Next() {
			var oid int64
			if err := rows.Scan(&oid); err != nil {
				rows.Close()
				return nil, nil, nil, err
			}
			if t := uint32(oid); t != 0 && !seen[t] {
				seen[t] = true
				next = append(next, t)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, nil, err
		}
		built, level = append(built, next...), next
	}
	rows, err := conn.Query(ctx, `SELECT a.attrelid::int8, bool_or(a.attnum = ANY(COALESCE((SELECT (string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts]
			FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary LIMIT 1), '{}')))
		FROM pg_attribute a
		WHERE a.attrelid = ANY($2::oid[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = ANY($1::oid[])
		GROUP BY a.attrelid`, built, slices.Sorted(maps.Keys(tables)))
	if err != nil {
		return nil, nil, nil, err
	}
	for rows.Next() {
		var rel int64
		var key bool
		if err := rows.Scan(&rel, &key); err != nil {
			rows.Close()
			return nil, nil, nil, err
		}
		using = append(using, relabeledTable{Table: tables[uint32(rel)], Rel: uint32(rel)})
		if key {
			keyed = append(keyed, tables[uint32(rel)])
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	slices.SortFunc(using, func(a, b relabeledTable) int { return strings.Compare(a.Table, b.Table) })
	slices.Sort(keyed)
	for _, typ := range types {
		var name string
		if err := conn.QueryRow(ctx, `SELECT format_type($1::oid, NULL)`, typ).Scan(&name); err == nil {
			names = append(names, name)
		} else {
			names = append(names, fmt.Sprint(typ))
		}
	}
	return using, keyed, names, nil
}

// lookForRelabels marks the changefeed's tables that hold enum values
// renamed since the last look. The labels are the source's, kept from
// one run of its reader to the next (a connection lost and made again),
// and from the resume point a source opened anew starts from; a look
// without labels before (a resume point written before they were kept)
// only reads them. Where the mark cannot be written, the labels of
// before are kept and the next look tries again.
func (s *Source) lookForRelabels(ctx context.Context, st *Stream) {
	if !st.ticks {
		return // no logical messages before PostgreSQL 14
	}
	conn := st.cat.conn
	now, at, err := readEnumLabels(ctx, conn)
	if err != nil {
		s.log.Warn("postgres source: cannot look for enum values renamed; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	s.mu.Lock()
	before := s.labels
	s.mu.Unlock()
	keep := func() {
		s.mu.Lock()
		s.labels, s.labelsAt = now, at
		s.mu.Unlock()
	}
	types := relabeled(before, now)
	if before == nil || len(types) == 0 {
		keep()
		return
	}
	version, err := st.cat.serverVersion(ctx)
	if err != nil {
		s.log.Warn("postgres source: cannot look for the tables of enum values renamed; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	tables := map[uint32]string{}
	for name, ts := range st.tables {
		if _, gone := st.gone[name]; ts.OID != 0 && !gone {
			tables[ts.OID] = name
		}
	}
	using, keyed, names, err := tablesUsing(ctx, conn, version, types, tables)
	if err != nil {
		s.log.Warn("postgres source: cannot look for the tables of enum values renamed; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
		return
	}
	if len(using) > 0 {
		b, _ := json.Marshal(relabelMark{markHead: markHead{Kind: relabelKind, Slot: s.cfg.Slot}, Tables: using, Types: names})
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b)); err != nil {
			s.log.Warn("postgres source: cannot mark the tables of enum values renamed; will look again", "changefeed", s.cf, "err", explain(s.cfg, err))
			return
		}
		s.log.Info("postgres source: enum values were renamed, which changes the rows that hold them without writing them; their tables are copied again", "changefeed", s.cf, "types", names, "tables", len(using))
	}
	for _, t := range keyed {
		// The copy writes the rows under their new keys; nothing deletes
		// them under the old ones.
		s.log.Warn("postgres source: an enum value renamed is in a table's primary key: the table is copied again under the new keys, and the sink keeps its rows under the old ones (a copy writes, it does not delete); delete them downstream, or copy the table again into a sink emptied of it", "changefeed", s.cf, "table", t, "types", names)
	}
	// Under one lock: a resume point persisted between the two would
	// keep the labels of before the mark.
	s.mu.Lock()
	s.labels, s.labelsAt = now, at
	s.markedPoints(now, at)
	s.mu.Unlock()
}

// markedPoints gives the resume points passed the labels of a look that
// wrote a mark: they are all before it, and a reader that starts again
// from one of them meets the mark, so its first look must not find the
// rename again (a second copy). s.mu is held.
func (s *Source) markedPoints(labels map[uint32]enumLabel, at int64) {
	for i := range s.points {
		s.points[i].Labels, s.points[i].LabelsAt = kept(labels), at
	}
	s.kept.Forget()
}

// takeLabels takes the labels of the resume point a run starts from: a
// source opened anew has none, and one that ran before may have older
// ones than the look before the point (another capture maintained the
// changefeed since its last look, and saw renames it did not). s.mu is
// held.
func (s *Source) takeLabels(p position) {
	if p.Labels != nil && (s.labels == nil || p.LabelsAt > s.labelsAt) {
		s.labels, s.labelsAt = p.Labels, p.LabelsAt
	}
}

// relabelMarked takes a mark of enum values renamed met in the open
// transaction: this changefeed's tables it names, still the relations
// it names, are copied again from here. Not a held table (its changes
// are held), one dropped (nothing to copy), nor one whose copy begins
// after here (copied by the operator since: its copy reads the new
// labels). It says whether content was such a mark (none goes on to the
// partitions).
func (s *Stream) relabelMarked(content []byte) bool {
	var m relabelMark
	if ok, mine := s.readMark(content, relabelKind, &m); !ok || !mine {
		return ok // not one; or another changefeed's, on the same database
	}
	why := againRelabeled + " (" + strings.Join(m.Types, ", ") + ")"
	for _, t := range m.Tables {
		st := s.tables[t.Table]
		_, held := s.held[t.Table]
		_, gone := s.gone[t.Table]
		if st == nil || st.OID != t.Rel || held || gone || s.unread(st) || slices.ContainsFunc(s.again, func(a copyAgain) bool { return a.Table == t.Table }) {
			continue
		}
		s.again = append(s.again, copyAgain{Table: t.Table, OID: t.Rel, At: s.againAt(t.Table), Why: why})
	}
	return true
}
