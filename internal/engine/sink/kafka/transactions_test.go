package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/model"
)

// With transaction-meta=true, at least once and exactly once, the BEGIN
// and END records of a batch's transactions reach the transaction topic
// (made by the sink), keyed by the transaction's id, before the batch's
// flush ack, also from a batch with no rows; a read_committed consumer
// (franz-go's, not ours) reads them, and the rows carry their
// transaction blocks.
func TestTransactionRecordsReachTheTransactionTopic(t *testing.T) {
	for _, delivery := range []string{kafka.DeliveryAtLeastOnce, kafka.DeliveryExactlyOnce} {
		t.Run(delivery, func(t *testing.T) {
			c := broker(t, "cdc")
			addrs := strings.Join(c.ListenAddrs(), ",")
			s := open(t, fmt.Sprintf("kafka://%s/cdc?transaction-meta=true&delivery=%s", addrs, delivery))
			ctx := context.Background()
			if _, _, err := sink.Resume(ctx, s, sink.Writer{Dispatcher: "p1.1", Partition: "p1", Epoch: 1}); err != nil {
				t.Fatal(err)
			}
			def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
			ins := func(ts model.Ts, key string, order uint32) row.Event {
				return row.Event{Kind: row.KindDML, Table: "shop.orders", CommitTs: ts, Def: def, Op: row.OpInsert, Key: key,
					New: []row.Value{row.Text(key)}, TxnOrder: order, TxnTableOrder: order}
			}
			summary := func(ts model.Ts, n int) row.Event {
				return row.Event{Kind: row.KindTxn, Table: "shop.orders", CommitTs: ts, Def: def,
					Txn: &row.TxnSummary{Events: n, Tables: []row.TableCount{{Table: "shop.orders", Events: n}}}}
			}
			acked := make(chan error, 2)
			for i, b := range []*sink.Batch{
				{Events: []row.Event{ins(20, "1", 1), ins(20, "2", 2)}, Txns: []row.Event{summary(20, 2)}, End: sink.Position{Ts: 20}},
				{Txns: []row.Event{summary(30, 1)}, End: sink.Position{Ts: 30}}, // its row came before
			} {
				b.Dispatcher, b.Epoch, b.OnFlushed = "p1.1", 1, func(err error) { acked <- err }
				if err := s.Write(ctx, b); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
			for range 2 {
				select {
				case err := <-acked:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("no flush ack")
				}
			}

			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("cdc-transaction", "cdc"),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var recs []string
			blocks := 0
			deadline := time.Now().Add(20 * time.Second)
			for (len(recs) < 4 || blocks < 2) && time.Now().Before(deadline) {
				fctx, cancel := context.WithTimeout(ctx, time.Second)
				fs := cl.PollFetches(fctx)
				cancel()
				fs.EachRecord(func(r *kgo.Record) {
					if r.Topic == "cdc" {
						if strings.Contains(string(r.Value), `"transaction":{"id":"20","total_order":`) {
							blocks++
						}
						return
					}
					var m struct {
						Status     string `json:"status"`
						ID         string `json:"id"`
						EventCount *int   `json:"event_count"`
					}
					if err := json.Unmarshal(r.Value, &m); err != nil {
						t.Fatalf("%s: %v", r.Value, err)
					}
					n := "null"
					if m.EventCount != nil {
						n = fmt.Sprint(*m.EventCount)
					}
					recs = append(recs, fmt.Sprintf("%s %s %s %s", r.Key, m.Status, m.ID, n))
				})
			}
			want := `{"id":"20"} BEGIN 20 null|{"id":"20"} END 20 2|{"id":"30"} BEGIN 30 null|{"id":"30"} END 30 1`
			if got := strings.Join(recs, "|"); got != want || blocks != 2 {
				t.Fatalf("transaction topic:\n%s\nwant\n%s\n(%d rows with their transaction block)", got, want, blocks)
			}
		})
	}
}
