package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Issue 33: a storage sink whose bucket is full stalled with state normal
// and an empty error; only the incidents said why. Now the changefeed
// shows state warning with the bucket's reason in its error, and the
// state metric the alert reads says so, within seconds of its
// dispatchers failing; once the bucket has room again it clears by
// itself, and nothing was lost.
func TestASinkThatKeepsFailingSaysSoAndClearsAfter(t *testing.T) {
	t.Parallel()
	bucket := buckettest.Start(t)
	tc := newTestCluster(t)
	tc.startCaptures(2)
	c := tc.client()
	ctx := context.Background()
	// Uploads refused for longer than retry-timeout fail the flush: the
	// dispatchers are recovered from their checkpoints, again and again.
	sinkURI := bucket.URI("demo", "flush-interval=200ms&retry-timeout=1s")
	created, _ := tc.runDemo(c, "gen://?tables=2&keys=50&rate=400", sinkURI, time.Second)
	if created.State != "normal" {
		t.Fatalf("created %s", created.State)
	}

	bucket.Full.Store(true)
	full := time.Now()
	var got *api.ChangefeedResponse
	tc.eventually("the changefeed says it does not advance, and why", 90*time.Second, func() bool {
		var err error
		got, err = c.Changefeed(ctx, "demo")
		return err == nil && got.State == string(model.ChangefeedWarning)
	})
	if !strings.Contains(got.Error, "not advancing") || !strings.Contains(got.Error, "XMinioStorageFull") && !strings.Contains(got.Error, "free drive threshold") {
		t.Fatalf("warning after %s with error %q; want the bucket's reason", time.Since(full).Round(time.Second), got.Error)
	}
	t.Logf("warning after %s: %s", time.Since(full).Round(time.Second), got.Error)
	warned := func(v float64) func() bool {
		return func() bool {
			for _, rn := range tc.nodes {
				if metricValue(tc.get(rn.addr, "/metrics"), `cdcctl_changefeed_state{changefeed="demo",state="warning"}`) != v {
					return false
				}
			}
			return true
		}
	}
	// Thirty seconds: with four race-built test packages at once, ten
	// were once not enough for every agent's metrics to be read warning
	// (the changefeed's status said so throughout).
	tc.eventually("every agent's state metric says warning", 30*time.Second, warned(1))

	bucket.Full.Store(false)
	healed := model.TsFromTime(time.Now())
	tc.waitCheckpoint(c, "demo", healed)
	tc.eventually("the warning clears by itself", 30*time.Second, func() bool {
		got, err := c.Changefeed(ctx, "demo")
		return err == nil && got.State == "normal" && got.Error == ""
	})
	tc.eventually("every agent's state metric says normal", 10*time.Second, warned(0))
	if n := bucket.Refused.Load(); n == 0 {
		t.Fatal("the bucket refused no upload")
	}
	rep := tc.pauseAndVerify(c, "demo", sinkURI, verifyStorage)
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify after the stall: %+v", rep)
	}
	t.Logf("%d uploads refused; verified %d events: %d lost, %d out of order, %d duplicates (replays after the failed flushes)",
		bucket.Refused.Load(), rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}
