package postgres

import "github.com/cdcctl/cdcctl/internal/model"

// A transaction's schema changes take positions from its base on, its
// rows base+ddlSlots. Which position a change takes must be the same in
// every read of the WAL: a stream opened again from the slot's confirmed
// position may hold, join or know other tables than the first read did
// (a remedy copied a table again, one was removed), and find other
// changes. A partition waits at its table's change one position below it
// and reads on only past it, so a change one read places lower than the
// other is never written, and one placed higher is written twice or
// waits for a partition already past it. Before 2026-12-07 each change
// took the position after the one before it, any table's: a transaction
// that altered two tables, read again after the first was removed, put
// the second's change one lower. So a table's change takes the position
// of the table's changes before it in the transaction, from the base on:
// its first at the base (its reset, the TRUNCATE of a table come back,
// before its others), whichever other tables' a read finds. Changes of
// different tables share positions: a partition waits only for its own
// table's. A table changed more than ddlSlots times in one transaction
// (its reset, TRUNCATEs and column changes) is held (tooManyChangesHold).

// slotFor is the position of table's next schema change in the open
// transaction; false when it is past the transaction's positions.
func (s *Stream) slotFor(table string) (model.Ts, bool) {
	j := 0
	for _, d := range s.ddls {
		if d.Table == table {
			j++
		}
	}
	if j >= ddlSlots {
		return 0, false
	}
	return s.base + model.Ts(j), true
}

// againAt is where a copy again of table is marked: the position its
// next schema change would take, the transaction's last when none is
// left.
func (s *Stream) againAt(table string) model.Ts {
	if at, ok := s.slotFor(table); ok {
		return at
	}
	return s.base + ddlSlots - 1
}
