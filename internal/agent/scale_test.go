package agent

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed whose routing table does not fit in one etcd transaction
// (etcd refuses more than 128 operations in one; this was a 500 "too
// many operations in txn request" above about 120 partitions) is
// created, placed and replicates with nothing lost. What an interrupted
// create left behind is cleared by the next create of that id, and
// removing the changefeed leaves no partition in etcd.
func TestAChangefeedLargerThanAnEtcdTransaction(t *testing.T) {
	t.Parallel()
	const tables = 600
	tc := newTestCluster(t)
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	leftover := tc.store.Keys().Partition("big", "p999999")
	if _, err := tc.cli.Put(ctx, leftover, `{"id":"p999999","changefeed":"big"}`); err != nil {
		t.Fatal(err)
	}
	sinkURI := "file://" + t.TempDir() + "?flush-interval=500ms"
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "big", Source: "gen://?tables=600&keys=2&rate=1200", Sink: sinkURI, PartitionsPerTable: 1})
	if err != nil {
		t.Fatalf("create a changefeed of %d partitions: %v", tables, err)
	}
	partitions := func() int64 {
		got, err := tc.cli.Get(ctx, tc.store.Keys().Partitions("big"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return got.Count
	}
	if n := partitions(); n != tables {
		t.Fatalf("etcd holds %d partitions of the changefeed; want %d", n, tables)
	}
	if got, _ := tc.cli.Get(ctx, leftover, clientv3.WithCountOnly()); got.Count != 0 {
		t.Fatalf("the interrupted create's partition %s is still there", leftover)
	}
	tc.eventually("every partition is placed", 60*time.Second, func() bool {
		for _, r := range tc.state().Partitions["big"] {
			if r.Route.Node == "" {
				return false
			}
		}
		return len(tc.state().Partitions["big"]) == tables
	})
	tc.waitCheckpoint(c, "big", model.Ts(created.StartTs)+model.TsFromMillis(2000))
	// Seed 004's series, summed over the captures: one-row tables whose
	// files never fill are flushed by max-flush-delay (200 ms) before
	// flush-interval (500 ms) comes.
	sum := func(series string) float64 {
		total := 0.0
		for _, rn := range tc.nodes {
			total += max(metricValue(tc.get(rn.addr, "/metrics"), series), 0)
		}
		return total
	}
	delayed, dataWrites := sum(`cdcctl_storage_flush_tasks_total{reason="delay"}`), sum("cdcctl_storage_data_write_duration_seconds_count")
	if delayed == 0 || dataWrites == 0 {
		t.Fatalf("storage metrics: %v flushes for delay, %v data writes; want some of each", delayed, dataWrites)
	}
	// The active-tables gauge may read 0 between flushes, but every
	// capture running the changefeed's partitions exports it.
	for id, rn := range tc.nodes {
		if v := metricValue(tc.get(rn.addr, "/metrics"), "cdcctl_storage_active_tables"); v < 0 {
			t.Fatalf("%s does not export cdcctl_storage_active_tables", id)
		}
	}
	rep := tc.pauseAndVerify(c, "big", sinkURI, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Expected == 0 {
		t.Fatalf("verify: %+v", rep)
	}
	if _, err := c.RemoveChangefeed(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if n := partitions(); n != 0 {
		t.Fatalf("%d partitions left in etcd after removing the changefeed", n)
	}
	t.Logf("%d partitions created, placed and verified: %d events, %d lost, %d duplicates; %v flushes for delay, %v data writes",
		tables, rep.Expected, rep.Lost, rep.Duplicates, delayed, dataWrites)
}
