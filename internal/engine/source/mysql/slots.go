package mysql

import (
	"slices"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A transaction has ddlSlots positions for its schema changes, from its
// base on, and its rows the one after them (settle). Which position a
// change takes must be the same in every read of the binary log: a
// reader started again from a resume point may hold, join or know other
// tables than the first read did (a remedy copied a table again, one was
// removed), and find other changes. A partition waits at its table's
// change one position below it and reads on only past it, so a change
// one read places lower than the other is never written, and one placed
// higher is written twice (a TRUNCATE twice erases rows written between)
// or waits for a partition already past it. So a table's change takes
// the position of the table's changes before it in the transaction, from
// the base on: its first at the base, whichever other tables' a read
// finds. Changes of different tables share positions: a partition waits
// only for its own table's. A table's changes keep their order: its reset
// (the TRUNCATE of a table added back), the change a prepared XA
// transaction carried to this commit, its own.

// addDDL adds a schema change of the transaction's own.
func (cur *txn) addDDL(d *source.Event) { cur.ddls = append(cur.ddls, d) }

// prepend puts schema changes before the transaction's own.
func (cur *txn) prepend(ds []*source.Event) {
	cur.ddls = append(slices.Clone(ds), cur.ddls...)
}

// placeAll gives every schema change its position, base plus its table's
// changes before it, and makes it its table's version.
func (cur *txn) placeAll(at *position, base model.Ts) {
	for i, d := range cur.ddls {
		j := 0
		for _, o := range cur.ddls[:i] {
			if o.Table == d.Table {
				j++
			}
		}
		// (A table has a reset, a change an XA transaction carried and
		// one of its own in a transaction at most, or an online schema
		// change's ALTERs at its swap: a schema statement is a
		// transaction of its own, a change at its rows is met once. Far
		// below ddlSlots.)
		cur.version(at, d, base+model.Ts(min(j, ddlSlots-1)))
	}
}
