package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// An update whose write meets a change of the changefeed made since it
// read it (a paused changefeed's status still moves while its
// dispatchers report where they stopped) is computed again from the new
// state and written, instead of answering the operator with a conflict.
// The test writes the changefeed's status itself between the update's
// read and its write, once: the first write is refused as stale, the
// second lands, and the sink option is there.
func TestAnUpdateThatMeetsAChangeIsComputedAgain(t *testing.T) {
	t.Parallel()
	var tc *enginetest.Cluster
	hook := enginetest.NewWriteHook(meta.NewKeys(enginetest.ClusterID).ChangefeedInfo("cf"), nil, func(ctx context.Context, n int) {
		if n != 1 {
			return
		}
		if err := tc.RewriteStatus(ctx, "cf"); err != nil {
			t.Errorf("write the status again: %v", err)
		}
	})
	tc = enginetest.New(t, enginetest.Options{Interceptor: hook.Interceptor})
	tc.StartCaptures(2)
	tc.CreateChangefeed("cf", "gen://?tables=1&keys=10&rate=50", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.Warm("cf", 0)
	tc.SetState("cf", model.ChangefeedPaused)

	hook.Arm()
	var res coordinator.UpdateResult
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) (err error) {
		res, err = c.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: "cf", SinkOptions: map[string]string{"flush-interval": "300ms"}, By: "test"})
		return err
	})
	if err != nil {
		t.Fatalf("the update after a change under it: %v", err)
	}
	n := hook.Met() // the update's transactions that reached etcd
	// Refused as stale once by the test's write, then written; a paused
	// changefeed's own late reports may make it stale once more (ci24
	// saw 3 writes).
	if n < 2 || n > 4 {
		t.Fatalf("the update wrote %d times; want 2 (refused as stale once, then written), or a little more when the changefeed's own status moved too", n)
	}
	if sink := tc.Changefeed("cf").Info.SinkURI; !strings.Contains(sink, "flush-interval=300ms") || !strings.Contains(res.Sink, "flush-interval=300ms") {
		t.Fatalf("after the update the sink is %s (the update answered %s)", sink, res.Sink)
	}
}
