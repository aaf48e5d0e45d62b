package maintainer_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Graceful partition moves (seed 003's migration through the routing
// table): a third capture joins and receives its share from the balance
// scheduler; then a capture is marked Draining and the drain scheduler
// moves every partition and the maintainer off it. Under load, with
// DDLs, nothing is lost and nothing is written twice.
func TestGracefulPartitionMovesAreExactlyOnce(t *testing.T) {
	// Rows held in memory until their flush (the default), and written
	// into their files' temporary files as they come (spool=bucket): a
	// partition handed over is flushed either way before its new owner
	// writes.
	for _, spool := range []string{"memory", "bucket"} {
		t.Run("spool="+spool, func(t *testing.T) {
			t.Parallel()
			gracefulMoves(t, "file://"+t.TempDir()+"?flush-interval=100ms&spool="+spool)
		})
	}
}

func gracefulMoves(t *testing.T, sinkURI string) {
	c := enginetest.New(t, enginetest.Options{})
	leader := c.StartCaptures(2)
	c.CreateChangefeed("demo", demoSource, sinkURI, 4)
	cp := c.Warm("demo", time.Second)
	c.Start("capture-3")
	c.Eventually("the new capture gets its share, moves finished", 30*time.Second, func() bool {
		on, draining := c.PartitionsOn("demo", "capture-3")
		return on >= 10 && draining == 0
	})
	cp = c.WaitCheckpoint("demo", cp+model.TsFromMillis(1000))

	victim := model.NodeID("capture-1")
	if leader.Node == victim {
		victim = "capture-2"
	}
	c.SetLiveness(victim, model.LivenessDraining)
	c.Eventually("every partition and the maintainer leave the Draining capture", 30*time.Second, func() bool {
		on, draining := c.PartitionsOn("demo", victim)
		m := c.Changefeed("demo").Maintainer.Node
		return on == 0 && draining == 0 && m != victim && m != ""
	})
	c.WaitCheckpoint("demo", cp+model.TsFromMillis(1000))

	rep := c.PauseAndVerify("demo")
	if !rep.OK || rep.Duplicates != 0 || rep.Expected < 5000 {
		t.Fatalf("verify after graceful moves: %+v", rep)
	}
	t.Logf("verified %d events after balancing and draining: %d lost, %d duplicates, %d out of order", rep.Expected, rep.Lost, rep.Duplicates, rep.OutOfOrder)
}
