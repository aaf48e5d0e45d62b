package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A Kafka changefeed is created with its hash-partitions pinned only
// while every registered node opens such a sink: one of an earlier
// version, in a rolling upgrade, refuses the parameter and could not
// open the changefeed's sink at all. With every node of this version,
// it is pinned to the topic's partition count.
func TestAKafkaSinkIsPinnedOnlyWhenEveryNodeOpensItPinned(t *testing.T) {
	t.Parallel()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "cdc"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	ctx := context.Background()
	f := leading(t)
	c, cli, store, term, view := f.c, f.cli, f.store, f.term, f.view
	register := func(id model.NodeID, features []string) {
		t.Helper()
		b, _ := json.Marshal(model.NodeInfo{ID: id, Version: "v", Features: features})
		if _, err := cli.Put(ctx, store.Keys().Node(id), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	register("capture-1", model.BuildFeatures)
	sink := "kafka://" + broker.ListenAddrs()[0] + "/cdc"
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the view does not show %s", what)
			}
		}
	}
	waitFor("capture-1", func() bool { return view.AllNodesHave(model.FeatureKafkaHashPartitions) })
	info, err := c.CreateChangefeed(ctx, term, CreateRequest{ID: "pinned", Source: "gen://?tables=1&keys=10&rate=10", Sink: sink})
	if err != nil || info.SinkURI != sink+"?hash-partitions=4" {
		t.Fatalf("every node of this version: the sink is kept as %q (%v)", info.SinkURI, err)
	}
	register("capture-2", []string{model.FeatureStorageNotes, model.FeatureRolloutHooks})
	waitFor("capture-2", func() bool { return !view.AllNodesHave(model.FeatureKafkaHashPartitions) })
	info, err = c.CreateChangefeed(ctx, term, CreateRequest{ID: "unpinned", Source: "gen://?tables=1&keys=10&rate=10", Sink: sink})
	if err != nil || strings.Contains(info.SinkURI, "hash-partitions") {
		t.Fatalf("a node of an earlier version registered: the sink is kept as %q (%v)", info.SinkURI, err)
	}
	// Nor is one pinned by changefeed update while that node runs.
	if err := c.SetChangefeedState(ctx, term, "unpinned", model.ChangefeedPaused, "test"); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateChangefeed(ctx, term, UpdateRequest{ID: "unpinned", SinkOptions: map[string]string{"hash-partitions": "4"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "finish the rolling upgrade first") {
		t.Fatalf("pinning while a node of an earlier version runs: %v", err)
	}
}
