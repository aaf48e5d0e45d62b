package storage_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// With transaction-meta=true, the transactions' records go to files of
// their own under cdcctl-transaction/ while the partition's rows, written
// in batches between them and flushed once, all stay in one data file of
// their table (a flush that held two buffers of one directory gave both
// the same file name: the second overwrote the first's rows).
func TestTransactionRecordsBesideTheirRows(t *testing.T) {
	dir := t.TempDir()
	s := open(t, "file://"+dir+"?flush-interval=10m&transaction-meta=true")
	def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	ins := func(ts model.Ts, key string, order, tableOrder uint32) row.Event {
		return row.Event{Kind: row.KindDML, Table: "shop.orders", CommitTs: ts, Def: def, Op: row.OpInsert, Key: key,
			New: []row.Value{row.Text(key)}, TxnOrder: order, TxnTableOrder: tableOrder}
	}
	summary := func(ts model.Ts, key string, n int) row.Event {
		return row.Event{Kind: row.KindTxn, Table: "shop.orders", CommitTs: ts, Def: def, Key: key,
			Txn: &row.TxnSummary{Events: n + 1, Tables: []row.TableCount{{Table: "shop.orders", Events: n}, {Table: "shop.items", Events: 1}}}}
	}
	batches := []*sink.Batch{
		{Events: []row.Event{ins(10, "1", 0, 0), ins(10, "2", 0, 0)}}, // a snapshot's rows
		{Events: []row.Event{ins(20, "3", 1, 1), ins(20, "4", 3, 2)}, Txns: []row.Event{summary(20, "3", 2)}},
		{Events: []row.Event{ins(30, "5", 2, 1)}, Txns: []row.Event{summary(30, "5", 1)}},
		{Txns: []row.Event{summary(40, "6", 0)}}, // its rows came in the batch before
	}
	for _, b := range batches {
		b.Dispatcher, b.Epoch, b.OnFlushed = "p1.1", 1, func(error) {}
		if err := s.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(context.Background(), "p1.1"); err != nil {
		t.Fatal(err)
	}
	read := func(pattern string) []string {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(files) != 1 {
			t.Fatalf("%s: %d files %v, want one", pattern, len(files), files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	rows := read("shop/orders/*/CDC_p1.1_*.json")
	if len(rows) != 5 {
		t.Fatalf("the table's file holds %d rows, want 5:\n%s", len(rows), strings.Join(rows, "\n"))
	}
	if strings.Contains(rows[0], `"transaction"`) || !strings.HasSuffix(rows[3], `"transaction":{"id":"20","total_order":3,"data_collection_order":2}}`) {
		t.Fatalf("rows' transaction blocks:\n%s", strings.Join(rows, "\n"))
	}
	recs := read("cdcctl-transaction/CDC_p1.1_*.json")
	if len(recs) != 6 {
		t.Fatalf("%d transaction records, want a BEGIN and an END for each of 3:\n%s", len(recs), strings.Join(recs, "\n"))
	}
	var begin, end struct {
		Status          string
		ID              string
		EventCount      *int `json:"event_count"`
		DataCollections []struct {
			DataCollection string `json:"data_collection"`
			EventCount     int    `json:"event_count"`
		} `json:"data_collections"`
	}
	if err := json.Unmarshal([]byte(recs[0]), &begin); err != nil || begin.Status != "BEGIN" || begin.ID != "20" || begin.EventCount != nil {
		t.Fatalf("BEGIN %s: %+v %v", recs[0], begin, err)
	}
	if err := json.Unmarshal([]byte(recs[1]), &end); err != nil || end.Status != "END" || end.ID != "20" || end.EventCount == nil || *end.EventCount != 3 ||
		len(end.DataCollections) != 2 || end.DataCollections[0].DataCollection != "shop.orders" || end.DataCollections[0].EventCount != 2 {
		t.Fatalf("END %s: %+v %v", recs[1], end, err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "cdcctl-transaction", "meta", "CDC_p1.1.index")); len(files) != 1 {
		t.Fatal("the records' files have no index")
	}
}
