package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Seed 000 end to end: drain a capture under load; its maintainers and
// then its dispatchers leave; it ends Stopping with the record cleared;
// the sink holds everything once.
func TestDrainUnderLoadIsExactlyOnce(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	dir := t.TempDir()
	sinkOf := func(name string) string { return "file://" + dir + "/" + name + "?flush-interval=100ms" }
	for _, name := range []string{"one", "two", "three"} {
		if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: name, Source: "gen://?tables=4&keys=100&rate=1500&ddl_every=1s", Sink: sinkOf(name), PartitionsPerTable: 2}); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := c.Changefeed(ctx, "one")
	tc.waitCheckpoint(c, "one", model.Ts(first.StartTs)+model.TsFromMillis(1000))

	// The seed's error table.
	for _, tt := range []struct {
		target string
		code   api.Code
	}{
		{"capture-9", api.CodeNotFound},
		{string(leader.Node), api.CodeBadRequest},
	} {
		if _, err := c.Drain(ctx, tt.target, api.DrainRequest{}); !api.IsCode(err, tt.code) {
			t.Fatalf("drain %s: %v, want %s", tt.target, err, tt.code)
		}
	}

	target := tc.followerOf(leader.Node)
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch == 0 || res.Target != string(target) {
		t.Fatalf("drain response %+v", res)
	}
	if _, err := c.Drain(ctx, string(tc.followerOf(target)), api.DrainRequest{}); !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeBadRequest) {
		t.Fatalf("a second drain: %v, want refused", err)
	}
	tc.eventually("the drain completes", 60*time.Second, func() bool {
		st, err := c.DrainStatus(ctx, string(target))
		return err == nil && !st.IsDraining && st.Liveness == "Stopping" && st.RemainingMaintainerCount == 0 && len(st.RemainingDispatcherCount) == 0
	})
	if tc.state().Drain != nil {
		t.Fatal("the drain record is still in etcd")
	}
	// Seed 000's metrics: the drain is over and its duration observed.
	tc.eventually("the drain metrics show the finished drain", 15*time.Second, func() bool {
		body := tc.get(tc.nodes[leader.Node].addr, "/metrics")
		return strings.Contains(body, `cdcctl_coordinator_drain_capture_status{capture_id="`+string(target)+`"} 0`) &&
			strings.Contains(body, `cdcctl_coordinator_drain_capture_duration_seconds_count{capture_id="`+string(target)+`"} 1`)
	})
	for _, name := range []string{"one", "two", "three"} {
		rep := tc.pauseAndVerify(c, name, sinkOf(name), verifyStorage)
		if !rep.OK || rep.Duplicates != 0 {
			t.Fatalf("%s after the drain: %+v", name, rep)
		}
	}
}
