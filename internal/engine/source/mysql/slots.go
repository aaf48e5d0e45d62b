package mysql

import (
	"slices"
	"sort"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A transaction has ddlSlots positions for its schema changes, from its
// base on, and its rows the one after them (settle). Which position a
// change takes must be the same in every read of the binary log: a
// reader started again from a resume point may hold, join or know other
// tables than the first read did (a remedy copied a table again, one was
// removed), and find other changes. A partition waits at a table's
// change one position below it and reads on only past it, so a change
// one read places lower than the other is never written, and one placed
// higher is written twice (a TRUNCATE twice erases rows written between)
// or waits for a partition already past it. So a change's position comes
// from the binary log and its table alone, never from how many other
// changes a read found before it:
//
//   - resets (the TRUNCATE of a table added back, the first transaction
//     after its addition): [0, carriedSlot), by name; a read that has
//     more due leaves the rest to the next transaction;
//   - the changes prepared XA transactions carried to this commit:
//     [carriedSlot, ownSlot), in the order they were read;
//   - its own: a change found at a table's rows takes the place of that
//     table's first rows among the tables the transaction wrote (any
//     table's, the changefeed's or not); a schema statement's, the place
//     of the table among those the statement names, after those.
//
// A change whose place is past its region holds its table (a transaction
// writing more tables than that, a statement naming more).
const (
	carriedSlot = 256
	ownSlot     = 512
)

// addDDL adds a schema change at its slot.
func (cur *txn) addDDL(d *source.Event, slot int) {
	cur.ddls = append(cur.ddls, d)
	cur.slots = append(cur.slots, slot)
}

// prepend puts schema changes before the others, at first, first+1, ….
func (cur *txn) prepend(ds []*source.Event, first int) {
	slots := make([]int, len(ds), len(ds)+len(cur.slots))
	for i := range ds {
		slots[i] = min(first+i, ddlSlots-1)
	}
	cur.ddls = append(slices.Clone(ds), cur.ddls...)
	cur.slots = append(slots, cur.slots...)
}

// tableSlot is the slot of a change found at table's rows: the place of
// the table's first rows among those of the tables the transaction
// wrote. Called at every rows event, of every table.
func (cur *txn) tableSlot(table string) int {
	if n := len(cur.tables); n > 0 && cur.tables[n-1] == table {
		return ownSlot + n - 1
	}
	if i := slices.Index(cur.tables, table); i >= 0 {
		return ownSlot + i
	}
	cur.tables = append(cur.tables, table)
	return ownSlot + len(cur.tables) - 1
}

// statementSlot is the slot of a change to the i-th table a schema
// statement names.
func (cur *txn) statementSlot(i int) int { return ownSlot + len(cur.tables) + i }

// sortSlots orders the schema changes by their slots (stable: a table's
// changes in one slot region keep their order).
func (cur *txn) sortSlots() {
	sort.Stable(bySlot{cur})
}

type bySlot struct{ *txn }

func (b bySlot) Len() int           { return len(b.ddls) }
func (b bySlot) Less(i, j int) bool { return b.slots[i] < b.slots[j] }
func (b bySlot) Swap(i, j int) {
	b.ddls[i], b.ddls[j] = b.ddls[j], b.ddls[i]
	b.slots[i], b.slots[j] = b.slots[j], b.slots[i]
}

// placeAll gives every schema change its position, base+slot, in slot
// order, and makes it its table's version.
func (cur *txn) placeAll(at *position, base model.Ts) {
	cur.sortSlots()
	for i, d := range cur.ddls {
		cur.version(at, d, base+model.Ts(cur.slots[i]))
	}
}
