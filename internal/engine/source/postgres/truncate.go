package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// truncate turns a TRUNCATE into a schema change of each table it empties:
// a new table version, same columns, whose statement says TRUNCATE. The
// transaction's rows of those tables before it are dropped (the TRUNCATE
// erases them; its rows all share one position after its schema
// changes).
func (s *Stream) truncate(ctx context.Context, m *pglogrepl.TruncateMessage) error {
	for _, id := range m.RelationIDs {
		rel, ok := s.rels[id]
		if !ok {
			return fmt.Errorf("pgoutput sent a TRUNCATE of relation %d before its definition", id)
		}
		if rel.gone || rel.held || rel.foreign || s.unread(s.tables[rel.table]) {
			continue
		}
		if s.partedTables[rel.table] {
			// Rows of it already went to the log as parts: they are
			// erased there (unseen yet, they were never read).
			s.erase = append(s.erase, rel.table)
			delete(s.partedTables, rel.table)
		}
		st := s.tables[rel.table]
		def, version := st.Def, st.Version+1
		if d := s.pendingDDL(rel.table); d != nil {
			def, version = d.Def, d.SchemaVersion+1
		}
		at, ok := s.slotFor(rel.table)
		if !ok {
			rel.held = true
			if err := s.holdToCopy(ctx, id, rel.table, tooManyChangesHold(s.changefeed(), rel.table)); err != nil {
				return err
			}
			continue
		}
		s.ddls = append(s.ddls, source.Event{Kind: source.KindDDL, Table: rel.table, CommitTs: at, TableVersion: at, Def: def, SchemaVersion: version,
			Statement: source.TruncatePrefix + quoteQualified(rel.table)})
		kept := s.rows[:0]
		for _, e := range s.rows {
			if e.Table != rel.table {
				kept = append(kept, e)
			}
		}
		s.rows = kept
	}
	return nil
}
