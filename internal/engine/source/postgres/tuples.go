package postgres

// Row changes in the stream: tuples decoded into values, and the routing
// key of each row.

import (
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// row decodes one row change into the open transaction.
func (s *Stream) row(m rowMessage) error {
	rel, ok := s.rels[m.rel]
	if !ok {
		return fmt.Errorf("pgoutput sent a row of relation %d before its definition", m.rel)
	}
	if rel.gone || rel.held || rel.foreign {
		// A foreign table: the publication (one the operator named) serves
		// others too.
		return nil
	}
	if st := s.tables[rel.table]; st != nil && st.ResetAt != 0 && s.base <= st.ResetAt {
		return nil // written before the table came back (ResetAt)
	}
	if err := s.decodeRow(rel, m); err != nil {
		rel.held = true
		s.hold(rel.table, fmt.Sprintf("a row cannot be decoded: %v; fix the cause, then 'cdcctl changefeed resume %s --table %s' reads it again from here", err, s.changefeed(), rel.table))
	}
	return nil
}

// decodeRow adds a row of a replicated table to the open transaction.
func (s *Stream) decodeRow(rel *relation, m rowMessage) error {
	// A row is written under the schema it was decoded with: the
	// table's, or a change earlier in the transaction.
	st := s.tables[rel.table]
	def, version, since := st.Def, st.Version, st.Since
	if d := s.pendingDDL(rel.table); d != nil {
		def, version, since = d.Def, d.SchemaVersion, d.CommitTs
	}
	op, wholeOld := m.op, m.wholeOld
	e := source.Event{Kind: source.KindDML, Table: rel.table, Def: def, Op: op, CommitTs: s.rowsTs(), SchemaVersion: version, TableVersion: since}
	var err error
	if m.newTuple != nil {
		if e.New, err = decodeTuple(m.newTuple, len(def.Columns), &s.arena); err != nil {
			return err
		}
	}
	if m.oldTuple != nil {
		if e.Old, err = decodeTuple(m.oldTuple, len(def.Columns), &s.arena); err != nil {
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
	if op == source.OpUpdate && wholeOld && e.Old != nil && e.New != nil {
		// An unchanged TOASTed column is not in the new tuple; under
		// REPLICA IDENTITY FULL the old tuple is the whole old row
		// (PostgreSQL flattens its TOASTed values), so it has the value,
		// which is the new one too. (A key-only old tuple sends its other
		// columns as NULL: nothing to take from it.)
		for i := range e.New {
			if e.New[i].Unchanged && !e.Old[i].Unchanged {
				e.New[i] = e.Old[i]
			}
		}
	}
	if op == source.OpDelete && e.Old == nil {
		return fmt.Errorf("a delete of %s came without its key; the table needs a primary key or REPLICA IDENTITY FULL", rel.table)
	}
	key, err := s.keyOf(def, e.Image())
	if err != nil {
		return fmt.Errorf("row of %s: %w", rel.table, err)
	}
	e.Key = key
	if op == source.OpUpdate && e.Old != nil {
		// PostgreSQL sends the old key of an update only when the key
		// changed. The row then moves to another key, maybe another
		// partition: it is a delete of the old key and an insert of the
		// new one, so each key's history stays whole in its partition.
		oldKey, err := s.keyOf(def, e.Old)
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
	if s.rows == nil {
		s.rows = make([]source.Event, 0, max(s.rowsHint, 8))
	}
	s.rows = append(s.rows, e)
	s.size += e.Size()
}

// keyPlan is how the rows of one table version are keyed: the key's
// column indexes and types, worked out once per definition (KeyNames and
// Index walk the columns and allocate: two thirds of the allocations of
// a row's decoding were theirs). A definition is a new value after every
// schema change, so its pointer names the version.
type keyPlan struct {
	names []string
	idx   []int
	types string
}

// maxKeyPlans bounds the plans kept: past it they are dropped and made
// again for the definitions in use.
const maxKeyPlans = 1024

func (s *Stream) keyPlanOf(def *source.TableDef) *keyPlan {
	if p := s.keyPlans[def]; p != nil {
		return p
	}
	if s.keyPlans == nil || len(s.keyPlans) >= maxKeyPlans {
		s.keyPlans = map[*source.TableDef]*keyPlan{}
	}
	p := &keyPlan{names: def.KeyNames(), types: keyTypes(def)}
	for _, n := range p.names {
		p.idx = append(p.idx, def.Index(n))
	}
	s.keyPlans[def] = p
	return p
}

// keyOf is a row's primary key as partitions route it: the key columns'
// values in key order, encoded so that keys compare in their natural
// order (model.EncodeKeyValues).
func (s *Stream) keyOf(def *source.TableDef, row []source.Value) (string, error) {
	p := s.keyPlanOf(def)
	parts := s.keyParts[:0]
	for i, at := range p.idx {
		v := row[at]
		if v.Null || v.Unchanged {
			return "", fmt.Errorf("key column %s has no value", p.names[i])
		}
		parts = append(parts, v.Text)
	}
	s.keyParts = parts[:0] // EncodeKeyValues keeps none of them
	return model.EncodeKeyValues(p.types, parts)
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
