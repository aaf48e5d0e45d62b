package agent

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// PostgreSQL into Kafka (a real-protocol broker in process): the existing
// rows and a live workload, through a split at an integer key, a move of
// the upper half and a TRUNCATE; the tables rebuilt from the topic's
// canal-json messages equal the upstream's, nothing twice.
func TestPostgresIntoKafka(t *testing.T) {
	t.Parallel()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	srv, dsn := startPostgres(t)
	tc := newTestCluster(t)
	tc.startCaptures(2)
	c := tc.clientWithTimeout(time.Minute)
	ctx := context.Background()
	sink := "kafka://" + broker.ListenAddrs()[0] + "/pg?protocol=canal-json"
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "pg", Source: dsn + "&tables=public.orders,public.items,public.events", Sink: sink, PartitionsPerTable: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := startFullWorkload(t, dsn)
	tc.waitSnapshot(c, "pg")
	tc.waitCheckpoint(c, "pg", model.Ts(created.StartTs)+model.TsFromMillis(1000))

	// Split the lower half of orders at 1000 and move its upper part.
	lower := tc.partitionFrom("pg", "public.orders", "")
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, lower.ID, "1000", plan.DefaultCosts) })
	parts, err := c.Partitions(ctx, "pg", "")
	if err != nil {
		t.Fatal(err)
	}
	var upper api.Partition
	for _, p := range parts.Partitions {
		if p.Table == "public.orders" && p.Start == "1000" {
			upper = p
		}
	}
	if upper.ID == "" {
		t.Fatalf("no partition starting at 1000 in %+v", parts.Partitions)
	}
	to := tc.followerOf(model.NodeID(upper.Node))
	tc.applyPlan(c, func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, upper.ID, to, plan.DefaultCosts) })
	if _, err := srv.Psql(ctx, "shop", "TRUNCATE items"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // rows after it too

	end := w.finish(t)
	if w.n < 20 {
		t.Fatalf("the workload committed only %d transactions", w.n)
	}
	tc.waitCheckpoint(c, "pg", model.TsFromTime(end.Add(100*time.Millisecond)))
	up, err := postgres.NewTableReader(dsn + "&tables=public.orders")
	if err != nil {
		t.Fatal(err)
	}
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return tc.waitCheckpoint(c, "pg", ts), nil }
	rep, err := verify.Database(ctx, sink, up, []string{"public.orders", "public.items", "public.events"}, wait)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Keys == 0 {
		t.Fatalf("rebuilt from Kafka after a split and a move: %+v", rep)
	}
	t.Logf("%d transactions, %d changes from Kafka, %d rows equal: %+v", w.n, rep.Events, rep.Keys, rep.TableReports)
	// Rebuilt only up to one second in, the topic does not match the final
	// tables: the check can fail.
	early, err := verify.Database(ctx, sink, atPosition{up, model.Ts(created.StartTs).Time().Add(time.Second)}, []string{"public.orders"}, wait)
	if err != nil {
		t.Fatal(err)
	}
	if early.OK || early.Lost == 0 {
		t.Fatalf("rebuilt at one second in, the topic matches the final upstream: %+v", early)
	}
}
