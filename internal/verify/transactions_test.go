package verify

import (
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
)

// The transaction check finds what a consumer applying each transaction
// at once would trip on, and nothing else: a whole transaction passes
// however often it was read; a row short of its END, rows without an
// END, an END without its BEGIN, a BEGIN alone and a table's order with
// a gap are each found; a table without a key may fall short of its END's count (its
// initial copy took the changes committed meanwhile), never exceed it.
func TestTransactionsAreJudgedAsAConsumerAppliesThem(t *testing.T) {
	end := func(id string, tables map[string]int) codec.TxnRecord {
		r := codec.TxnRecord{Status: codec.TxnEnd, ID: id}
		n := 0
		for table, c := range tables {
			r.DataCollections = append(r.DataCollections, codec.DataCollection{DataCollection: table, EventCount: c})
			n += c
		}
		r.EventCount = &n
		return r
	}
	tx := NewTransactions()
	tx.Keyless["s.log"] = true
	row := func(id, table string, total, inTable int) {
		tx.AddRow(table, &codec.TxnPlace{ID: id, TotalOrder: total, TableOrder: inTable})
	}
	// 10: whole, its END and one row read twice (at least once).
	for range 2 {
		tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "10"})
		tx.AddRecord(end("10", map[string]int{"s.a": 2, "s.b": 1}))
		row("10", "s.a", 1, 1)
	}
	row("10", "s.b", 2, 1)
	row("10", "s.a", 3, 2)
	// 20: a row of s.a missing.
	tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "20"})
	tx.AddRecord(end("20", map[string]int{"s.a": 2}))
	row("20", "s.a", 1, 1)
	// 30: rows and no END.
	row("30", "s.a", 1, 1)
	// 40: an END and no BEGIN.
	tx.AddRecord(end("40", map[string]int{"s.b": 1}))
	row("40", "s.b", 1, 1)
	// 50: the keyless table short of its count (the copy took a row).
	tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "50"})
	tx.AddRecord(end("50", map[string]int{"s.log": 2, "s.a": 1}))
	row("50", "s.log", 1, 1)
	row("50", "s.a", 3, 1)
	// 60: a table's order with a gap.
	tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "60"})
	tx.AddRecord(end("60", map[string]int{"s.a": 2}))
	row("60", "s.a", 1, 1)
	row("60", "s.a", 2, 3)
	// 62: a BEGIN alone (its rows and its END lost).
	tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "62"})
	// 70: after the checked point, not judged.
	row("70", "s.a", 1, 1)
	tx.AddRecord(codec.TxnRecord{Status: codec.TxnBegin, ID: "71"})
	tx.AddRow("s.a", nil) // a snapshot row

	bad := tx.Check(false, 0, 65)
	want := []string{
		"transaction 20: END counts 2 rows, the sink holds 1",
		"transaction 20: END counts 2 rows of s.a, the sink holds 1",
		"transaction 30: map[s.a:1] rows and no END record",
		"transaction 40: an END record and no BEGIN",
		"transaction 60: data_collection_order of s.a is [1 3], want 1..2",
		"transaction 62: a BEGIN record and no END",
	}
	joined := strings.Join(bad, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("the check did not find %q:\n%s", w, joined)
		}
	}
	if len(bad) != 6 || strings.Contains(joined, "transaction 10") || strings.Contains(joined, "transaction 50") || strings.Contains(joined, "transaction 7") {
		t.Errorf("the check found, want transactions 20 (twice), 30, 40, 60 and 62 only:\n%s", joined)
	}
	if tx.Duplicates != 3 || tx.Untagged != 1 || tx.Judged(0, 65) != 5 {
		t.Errorf("%d read twice (want 3: a BEGIN, an END, a row), %d untagged (1), %d judged (5)", tx.Duplicates, tx.Untagged, tx.Judged(0, 65))
	}
	// With gapless, transaction 50's total order (1, 3) of a keyless
	// table short is not a gap to judge; 10's is whole.
	for _, b := range tx.Check(true, 0, 65) {
		if strings.Contains(b, "transaction 10") || strings.Contains(b, "transaction 50") {
			t.Errorf("gapless judged a whole transaction: %s", b)
		}
	}
}
