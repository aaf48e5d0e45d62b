package enginetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Transactions is what a file sink written with transaction-meta=true
// holds of its source transactions, as a consumer that applies each
// transaction at once reads it: the BEGIN and END records, and the rows
// that carry a transaction block.
type Transactions struct {
	// Ends and Begins count each transaction's records by id.
	Ends   map[string][]TxnRecord
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
}

// TxnRecord is a BEGIN or END record as a consumer decodes it
// (docs/transactions.md).
type TxnRecord struct {
	Status          string `json:"status"`
	ID              string `json:"id"`
	SourceID        string `json:"source_id"`
	EventCount      *int   `json:"event_count"`
	DataCollections []struct {
		DataCollection string `json:"data_collection"`
		EventCount     int    `json:"event_count"`
	} `json:"data_collections"`
}

func newTransactions() Transactions {
	return Transactions{Ends: map[string][]TxnRecord{}, Begins: map[string]int{}, Rows: map[string]map[string]int{},
		Orders: map[string][]int{}, TableOrders: map[string]map[string][]int{}}
}

// ReadTransactions reads every data file of a file:// sink.
func ReadTransactions(t testing.TB, sinkURI string) Transactions {
	t.Helper()
	u, err := url.Parse(sinkURI)
	if err != nil || u.Scheme != "file" {
		t.Fatalf("ReadTransactions reads a file:// sink, not %q", sinkURI)
	}
	tx := newTransactions()
	err = filepath.WalkDir(u.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), "CDC_") || !strings.HasSuffix(d.Name(), ".json") {
			return err
		}
		rel, _ := filepath.Rel(u.Path, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		record := strings.HasPrefix(rel, "cdcctl-transaction"+string(filepath.Separator))
		for sc.Scan() {
			if err := tx.add(sc.Bytes(), record); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// ReadKafkaTransactions reads a Kafka sink's topic and its transaction
// topic (<topic>-transaction) as a read_committed consumer (franz-go's),
// until both have been quiet for a second.
func ReadKafkaTransactions(t testing.TB, brokers []string, topic string) Transactions {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic, topic+"-transaction"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tx := newTransactions()
	for quiet := 0; quiet < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if err == nil {
				err = tx.add(r.Value, r.Topic != topic)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return tx
}

// add takes one message: a BEGIN or END record, or a row change (a DDL
// or a watermark is passed over).
func (tx *Transactions) add(line []byte, record bool) error {
	if record {
		var r TxnRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if r.Status == "BEGIN" {
			tx.Begins[r.ID]++
		} else {
			tx.Ends[r.ID] = append(tx.Ends[r.ID], r)
		}
		return nil
	}
	var m struct {
		Database, Table string
		IsDdl           bool
		Data            []map[string]any
		Transaction     *struct {
			ID                  string `json:"id"`
			TotalOrder          int    `json:"total_order"`
			DataCollectionOrder int    `json:"data_collection_order"`
		}
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return err
	}
	if m.IsDdl || len(m.Data) == 0 {
		return nil
	}

	if m.Transaction == nil {
		tx.Untagged++
		return nil
	}
	id, table := m.Transaction.ID, m.Database+"."+m.Table
	if tx.Rows[id] == nil {
		tx.Rows[id], tx.TableOrders[id] = map[string]int{}, map[string][]int{}
	}
	tx.Rows[id][table]++
	tx.Orders[id] = append(tx.Orders[id], m.Transaction.TotalOrder)
	tx.TableOrders[id][table] = append(tx.TableOrders[id][table], m.Transaction.DataCollectionOrder)
	return nil
}

// Check returns what a consumer applying transactions whole would find
// wrong, at most a few lines: a transaction whose rows do not add up to
// its END (in all, or for a table), rows with no END, a BEGIN or END
// written more or less than once, orders that are not 1..n. gapless
// false allows gaps in total_order (a TRUNCATE in a transaction erases
// the rows it wrote before). Only transactions committed after from and
// at or below upTo are judged: up to a checkpoint everything is in the
// sink (after it, one partition may have flushed its share and another
// not yet); a table without a key takes the changes that commit during
// its initial copy into the copy (docs/transactions.md), so a scenario
// with one judges from the snapshot's end.
func (tx Transactions) Check(gapless bool, from, upTo model.Ts) []string {
	var bad []string
	add := func(format string, a ...any) {
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, a...))
		}
	}
	below := func(id string) bool {
		ts, err := strconv.ParseUint(id, 10, 64)
		return err == nil && model.Ts(ts) > from && model.Ts(ts) <= upTo
	}
	for id, ends := range tx.Ends {
		if !below(id) {
			continue
		}
		if len(ends) != 1 || tx.Begins[id] != 1 {
			add("transaction %s: %d BEGIN and %d END records, want one each", id, tx.Begins[id], len(ends))
		}
		end := ends[0]
		rows := 0
		for _, n := range tx.Rows[id] {
			rows += n
		}
		if end.EventCount == nil || *end.EventCount != rows {
			add("transaction %s: END counts %v rows, the sink holds %d", id, end.EventCount, rows)
		}
		for _, c := range end.DataCollections {
			if got := tx.Rows[id][c.DataCollection]; got != c.EventCount {
				add("transaction %s: END counts %d rows of %s, the sink holds %d", id, c.EventCount, c.DataCollection, got)
			}
			if orders := slices.Sorted(slices.Values(tx.TableOrders[id][c.DataCollection])); !isOneTo(orders, len(orders)) {
				add("transaction %s: data_collection_order of %s is %v, want 1..%d", id, c.DataCollection, orders, len(orders))
			}
		}
		orders := slices.Sorted(slices.Values(tx.Orders[id]))
		if len(slices.Compact(slices.Clone(orders))) != len(orders) || gapless && !isOneTo(orders, rows) {
			add("transaction %s: total_order is %v for %d rows", id, orders, rows)
		}
	}
	for id := range tx.Rows {
		if len(tx.Ends[id]) == 0 && below(id) {
			add("transaction %s: %v rows and no END record", id, tx.Rows[id])
		}
	}
	return bad
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
