package coordinator_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
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
	// 250 partitions: three transactions of at most maxOpsPerTxn (100)
	// writes, each under etcd's 128.
	const tables = 250
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	ctx := context.Background()
	leftover := tc.Store.Keys().Partition("big", "p999999")
	if _, err := tc.Client.Put(ctx, leftover, `{"id":"p999999","changefeed":"big"}`); err != nil {
		t.Fatal(err)
	}
	sinkURI := "file://" + t.TempDir() + "?flush-interval=500ms"
	created := tc.CreateChangefeed("big", "gen://?tables=250&keys=2&rate=500", sinkURI, 1)
	partitions := func() int64 {
		got, err := tc.Client.Get(ctx, tc.Store.Keys().Partitions("big"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return got.Count
	}
	if n := partitions(); n != tables {
		t.Fatalf("etcd holds %d partitions of the changefeed; want %d", n, tables)
	}
	if got, _ := tc.Client.Get(ctx, leftover, clientv3.WithCountOnly()); got.Count != 0 {
		t.Fatalf("the interrupted create's partition %s is still there", leftover)
	}
	tc.Eventually("every partition is placed", 60*time.Second, func() bool {
		for _, r := range tc.State().Partitions["big"] {
			if r.Route.Node == "" {
				return false
			}
		}
		return len(tc.State().Partitions["big"]) == tables
	})
	tc.WaitCheckpoint("big", created.StartTs+model.TsFromMillis(2000))
	rep := tc.PauseAndVerify("big")
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Expected == 0 {
		t.Fatalf("verify: %+v", rep)
	}
	tc.RemoveChangefeed("big")
	if n := partitions(); n != 0 {
		t.Fatalf("%d partitions left in etcd after removing the changefeed", n)
	}
	t.Logf("%d partitions created, placed and verified: %d events, %d lost, %d duplicates", tables, rep.Expected, rep.Lost, rep.Duplicates)
}
