package postgres

// Row changes in the stream: tuples decoded into values, and the routing
// key of each row.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// row decodes one row change into the open transaction. wholeOld says
// the old tuple is the whole old row (REPLICA IDENTITY FULL), not only
// its key.
func (s *Stream) row(relID uint32, op source.Op, newTuple, oldTuple *pglogrepl.TupleData, wholeOld bool) error {
	rel, ok := s.rels[relID]
	if !ok {
		return fmt.Errorf("pgoutput sent a row of relation %d before its definition", relID)
	}
	if rel.gone || rel.held || rel.foreign {
		// A foreign table: the publication (one the operator named) serves
		// others too.
		return nil
	}
	if s.unread(s.tables[rel.table]) {
		return nil // written before the table came back or joined
	}
	if err := s.decodeRow(rel, op, newTuple, oldTuple, wholeOld); err != nil {
		rel.held = true
		s.hold(rel.table, fmt.Sprintf("a row cannot be decoded: %v; fix the cause, then 'cdcctl changefeed resume %s --table %s' reads it again from here", err, s.changefeed(), rel.table))
	}
	return nil
}

// decodeRow adds a row of a replicated table to the open transaction.
func (s *Stream) decodeRow(rel *relation, op source.Op, newTuple, oldTuple *pglogrepl.TupleData, wholeOld bool) error {
	// A row is written under the schema it was decoded with: the
	// table's, or a change earlier in the transaction.
	st := s.tables[rel.table]
	def, version, since := st.Def, st.Version, st.Since
	if d := s.pendingDDL(rel.table); d != nil {
		def, version, since = d.Def, d.SchemaVersion, d.CommitTs
	}
	e := source.Event{Kind: source.KindDML, Table: rel.table, Def: def, Op: op, CommitTs: s.rowsTs(), SchemaVersion: version, TableVersion: since}
	var err error
	if newTuple != nil {
		if e.New, err = values(newTuple, len(def.Columns)); err != nil {
			return err
		}
	}
	if oldTuple != nil {
		if e.Old, err = values(oldTuple, len(def.Columns)); err != nil {
			return err
		}
		if !wholeOld {
			// Only the key (the replica identity) was sent; PostgreSQL
			// fills the other columns with NULL, which they may not be.
			// They are not known: marked so, never written as NULL.
			for i, c := range def.Columns {
				if c.KeyPos == 0 {
					e.Old[i] = source.Value{Unchanged: true}
				}
			}
		}
	}
	if op == source.OpUpdate && e.Old != nil && e.New != nil {
		// An unchanged TOASTed column is not in the new tuple; under
		// REPLICA IDENTITY FULL the old tuple is the whole old row
		// (PostgreSQL flattens its TOASTed values), so it has the value,
		// which is the new one too. Under the default identity the old
		// tuple holds only the key, which PostgreSQL sends when a key
		// column is stored out of line, unchanged or not: an unchanged
		// one is the new row's key too (without it the row had no key,
		// and its table was held for good). Its other columns come as
		// NULL: nothing to take from them.
		for i := range e.New {
			if e.New[i].Unchanged && !e.Old[i].Unchanged && (wholeOld || def.Columns[i].KeyPos > 0) {
				e.New[i] = e.Old[i]
			}
		}
	}
	if op == source.OpDelete && e.Old == nil {
		return fmt.Errorf("a delete of %s came without its key; the table needs a primary key or REPLICA IDENTITY FULL", rel.table)
	}
	key, err := keyOf(def, e.Image())
	if err != nil {
		return fmt.Errorf("row of %s: %w", rel.table, err)
	}
	e.Key = key
	if op == source.OpUpdate && e.Old != nil {
		// PostgreSQL sends the old key of an update only when the key
		// changed. The row then moves to another key, maybe another
		// partition: it is a delete of the old key and an insert of the
		// new one, so each key's history stays whole in its partition.
		oldKey, err := keyOf(def, e.Old)
		if err == nil && oldKey != key {
			del, ins := e, e
			del.Op, del.Key, del.New = source.OpDelete, oldKey, nil
			ins.Op, ins.Old = source.OpInsert, nil
			s.add(del)
			s.add(ins)
			return nil
		}
	}
	s.add(e)
	return nil
}

func (s *Stream) add(e source.Event) {
	s.rows = append(s.rows, e)
	s.size += e.Size()
}

// values turns a tuple into values in column order. An old tuple of an
// update or delete under the default replica identity holds only the key
// columns: the others are sent as NULL (decodeRow marks them unknown).
func values(t *pglogrepl.TupleData, n int) ([]source.Value, error) {
	if len(t.Columns) != n {
		return nil, fmt.Errorf("a row has %d columns, its table definition %d", len(t.Columns), n)
	}
	out := make([]source.Value, n)
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			out[i] = source.Null
		case pglogrepl.TupleDataTypeToast:
			out[i] = source.Value{Unchanged: true}
		case pglogrepl.TupleDataTypeText:
			out[i] = source.Text(string(c.Data))
		default:
			return nil, errors.New("pgoutput sent a binary value; the stream is requested in text")
		}
	}
	return out, nil
}

// keyOf is a row's primary key as partitions route it: the key columns'
// values in key order, encoded so that keys compare in their natural
// order (model.EncodeKeyValues).
func keyOf(def *source.TableDef, row []source.Value) (string, error) {
	names := def.KeyNames()
	parts := make([]string, len(names))
	for i, n := range names {
		v := row[def.Index(n)]
		if v.Null || v.Unchanged {
			return "", fmt.Errorf("key column %s has no value", n)
		}
		parts[i] = v.Text
	}
	return model.EncodeKeyValues(keyTypes(def), parts)
}

// keyTypes names a table's key column types, without modifiers, as
// spans carry them ("int8", "text,int4").
func keyTypes(def *source.TableDef) string {
	names := def.KeyNames()
	if len(names) == 0 {
		return model.NoKey
	}
	types := make([]string, len(names))
	for i, n := range names {
		t := def.Columns[def.Index(n)].Type
		if j := strings.IndexByte(t, '('); j >= 0 {
			t = t[:j]
		}
		types[i] = t
	}
	return strings.Join(types, ",")
}
