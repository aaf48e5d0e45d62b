package changefeeds

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// PostgreSQL into Kafka (a real-protocol broker in process): the existing
// rows and a live workload, through a split at an integer key, a move of
// the upper half and a TRUNCATE; the tables rebuilt from the topic's
// canal-json messages equal the upstream's, nothing twice. With
// transaction-meta, a read_committed consumer finds every transaction up
// to the checkpoint whole: its END's counts are its rows in the topic.
func TestAChangefeedIntoKafka(t *testing.T) {
	t.Parallel()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	srv, dsn := startShop(t)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	ctx := context.Background()
	sink := "kafka://" + broker.ListenAddrs()[0] + "/pg?protocol=canal-json&transaction-meta=true"
	created := tc.CreateChangefeed("pg", dsn+"&tables=public.orders,public.items,public.events", sink, 2)
	w := startFullWorkload(t, dsn)
	tc.WaitSnapshot("pg")
	copied := model.TsFromTime(time.Now())
	tc.WaitCheckpoint("pg", created.StartTs+model.TsFromMillis(1000))

	// Split the lower half of orders at 1000 and move its upper part.
	lower := tc.PartitionFrom("pg", "public.orders", "")
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, lower.ID, "1000", plan.DefaultCosts) })
	upper := tc.PartitionFrom("pg", "public.orders", "1000")
	if upper.ID == "" {
		t.Fatalf("no partition starting at 1000 in %+v", tc.State().Partitions["pg"])
	}
	tc.MoveElsewhere(upper.ID)
	if _, err := srv.Psql(ctx, "shop", "TRUNCATE items"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // rows after it too

	end := w.finishAfter(t, 20)
	if w.n < 20 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	rep := verifyShop(t, tc, dsn, shopTables, end)
	if !rep.OK || rep.Duplicates != 0 || rep.Keys == 0 {
		t.Fatalf("rebuilt from Kafka after a split and a move: %+v", rep)
	}
	t.Logf("%d transactions, %d changes from Kafka, %d rows equal: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	tx := enginetest.ReadKafkaTransactions(t, broker.ListenAddrs(), "pg")
	if bad := tx.Check(true, copied, model.Ts(rep.CheckedUpToTs)); len(bad) > 0 || len(tx.Ends) < w.n/2 {
		t.Fatalf("%d transactions of %d in the transaction topic; a consumer would find:\n%s", len(tx.Ends), w.n, strings.Join(bad, "\n"))
	}
	// Rebuilt only up to one second in, the topic does not match the final
	// tables: the check can fail.
	if early := rebuiltEarly(t, tc, dsn, []string{"public.orders"}); early.OK || early.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the topic matches the final upstream: %+v", early)
	}
}
