package postgres_test

import (
	"context"
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
// canal-json messages equal the upstream's, nothing twice.
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
	sink := "kafka://" + broker.ListenAddrs()[0] + "/pg?protocol=canal-json"
	created := tc.CreateChangefeed("pg", dsn+"&tables=public.orders,public.items,public.events", sink, 2)
	w := startFullWorkload(t, dsn)
	tc.WaitSnapshot("pg")
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

	end := w.finish(t)
	if w.n < 20 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	rep := verifyShop(t, tc, dsn, shopTables, end)
	if !rep.OK || rep.Duplicates != 0 || rep.Keys == 0 {
		t.Fatalf("rebuilt from Kafka after a split and a move: %+v", rep)
	}
	t.Logf("%d transactions, %d changes from Kafka, %d rows equal: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	// Rebuilt only up to one second in, the topic does not match the final
	// tables: the check can fail.
	if early := rebuiltEarly(t, tc, dsn, []string{"public.orders"}); early.OK || early.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the topic matches the final upstream: %+v", early)
	}
}
