package verify

// This file checks transaction boundaries (a sink's transaction-meta) as
// a consumer that applies each source transaction at once relies on
// them: every transaction has one BEGIN and one END record, the END's
// counts are the rows the sink holds of it (in all and per table), and
// the rows' places in it are 1..n.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Transactions is what a sink holds of its source transactions: the
// BEGIN and END records, and the rows that carry a transaction block.
type Transactions struct {
	// Ends and Begins count each transaction's records by id.
	Ends   map[string][]codec.TxnRecord
	Begins map[string]int
	// Rows counts each transaction's rows by table ("schema.table");
	// Orders are their total_order values, TableOrders their
	// data_collection_order values by table.
	Rows        map[string]map[string]int
	Orders      map[string][]int
	TableOrders map[string]map[string][]int
	// Untagged are rows without a transaction block (the initial
	// snapshot's).
	Untagged int
	// Duplicates counts the records and rows read more than once (at
	// least once, a crash writes them again): each is counted once.
	Duplicates int
	seen       map[string]map[int]bool // total_order values by id
	// Keyless are the tables without a key: during its initial copy
	// such a table takes the changes committed meanwhile into the copy
	// (docs/transactions.md), so its rows may fall short of an END's
	// count.
	Keyless map[string]bool
}

// NewTransactions is an empty collection.
func NewTransactions() *Transactions {
	return &Transactions{Ends: map[string][]codec.TxnRecord{}, Begins: map[string]int{}, Rows: map[string]map[string]int{},
		Orders: map[string][]int{}, TableOrders: map[string]map[string][]int{}, Keyless: map[string]bool{}, seen: map[string]map[int]bool{}}
}

// AddRecord takes a BEGIN or END record.
func (tx *Transactions) AddRecord(r codec.TxnRecord) {
	switch {
	case r.Status == codec.TxnBegin && tx.Begins[r.ID] == 0:
		tx.Begins[r.ID]++
	case r.Status != codec.TxnBegin && len(tx.Ends[r.ID]) == 0:
		tx.Ends[r.ID] = append(tx.Ends[r.ID], r)
	default:
		tx.Duplicates++
	}
}

// AddRecordLine takes a record as a line of JSON.
func (tx *Transactions) AddRecordLine(line []byte) error {
	var r codec.TxnRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("not a transaction record: %v", err)
	}
	tx.AddRecord(r)
	return nil
}

// AddRow takes a row of table ("schema.table") and its place in its
// transaction (nil: a row of no transaction, the snapshot's).
func (tx *Transactions) AddRow(table string, p *codec.TxnPlace) {
	if p == nil {
		tx.Untagged++
		return
	}
	id := p.ID
	if tx.Rows[id] == nil {
		tx.Rows[id], tx.TableOrders[id], tx.seen[id] = map[string]int{}, map[string][]int{}, map[int]bool{}
	}
	if tx.seen[id][p.TotalOrder] {
		tx.Duplicates++
		return
	}
	tx.seen[id][p.TotalOrder] = true
	tx.Rows[id][table]++
	tx.Orders[id] = append(tx.Orders[id], p.TotalOrder)
	tx.TableOrders[id][table] = append(tx.TableOrders[id][table], p.TableOrder)
}

// AddChanges takes a sink's row changes (verify reads them to rebuild
// tables).
func (tx *Transactions) AddChanges(streams []codec.ChangeStream) {
	for _, s := range streams {
		for i := range s.Changes {
			c := &s.Changes[i]
			table := c.Database + "." + c.Table
			if len(c.PkNames) == 0 {
				tx.Keyless[table] = true
			}
			tx.AddRow(table, c.Txn)
		}
	}
}

// Judged counts the transactions Check judges.
func (tx *Transactions) Judged(from, upTo model.Ts) int {
	n := 0
	for id := range tx.Ends {
		if inRange(id, from, upTo) {
			n++
		}
	}
	return n
}

func inRange(id string, from, upTo model.Ts) bool {
	ts, err := strconv.ParseUint(id, 10, 64)
	return err == nil && model.Ts(ts) > from && model.Ts(ts) <= upTo
}

// Check returns what a consumer applying transactions whole would find
// wrong, at most ten lines: a transaction whose rows do not add up to
// its END (in all, or for a table), rows with no END, a BEGIN or END
// missing, orders that are not 1..n. What was read twice counts once
// (Duplicates counts it; judging it is the caller's). gapless
// false allows gaps in total_order (a TRUNCATE in a transaction erases
// the rows it wrote before). Only transactions committed after from and
// at or below upTo are judged: up to a checkpoint everything is in the
// sink (after it, one partition may have flushed its share and another
// not yet). A keyless table's rows may fall short of their END's count,
// not exceed it.
func (tx *Transactions) Check(gapless bool, from, upTo model.Ts) []string {
	var bad []string
	add := func(format string, a ...any) {
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, a...))
		}
	}
	for id, ends := range tx.Ends {
		if !inRange(id, from, upTo) {
			continue
		}
		if tx.Begins[id] == 0 {
			add("transaction %s: an END record and no BEGIN", id)
		}
		end := ends[0]
		rows, short := 0, false
		for _, n := range tx.Rows[id] {
			rows += n
		}
		for _, c := range end.DataCollections {
			got := tx.Rows[id][c.DataCollection]
			fewer := tx.Keyless[c.DataCollection] && got < c.EventCount
			short = short || fewer
			if got != c.EventCount && !fewer {
				add("transaction %s: END counts %d rows of %s, the sink holds %d", id, c.EventCount, c.DataCollection, got)
			}
			if orders := slices.Sorted(slices.Values(tx.TableOrders[id][c.DataCollection])); !fewer && !isOneTo(orders, len(orders)) {
				add("transaction %s: data_collection_order of %s is %v, want 1..%d", id, c.DataCollection, orders, len(orders))
			}
		}
		if end.EventCount == nil || *end.EventCount != rows && !(short && rows < *end.EventCount) {
			add("transaction %s: END counts %v rows, the sink holds %d", id, count(end.EventCount), rows)
		}
		orders := slices.Sorted(slices.Values(tx.Orders[id]))
		if gapless && !short && !isOneTo(orders, rows) {
			add("transaction %s: total_order is %v for %d rows", id, orders, rows)
		}
	}
	for id := range tx.Rows {
		if len(tx.Ends[id]) == 0 && inRange(id, from, upTo) {
			add("transaction %s: %v rows and no END record", id, tx.Rows[id])
		}
	}
	for id, n := range tx.Begins {
		if n > 0 && len(tx.Ends[id]) == 0 && len(tx.Rows[id]) == 0 && inRange(id, from, upTo) {
			// Its rows and END both lost (a later change may have left
			// the tables as they should be).
			add("transaction %s: a BEGIN record and no END", id)
		}
	}
	slices.Sort(bad)
	return bad
}

func count(n *int) string {
	if n == nil {
		return "no"
	}
	return strconv.Itoa(*n)
}

func isOneTo(orders []int, n int) bool {
	if len(orders) != n {
		return false
	}
	for i, o := range orders {
		if o != i+1 {
			return false
		}
	}
	return true
}
