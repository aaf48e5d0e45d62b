package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A cluster electing through MariaDB replicates under load through a
// kill of its coordinator (another capture takes the lock once it expires
// on the database, with a larger epoch) and a restart of MariaDB itself:
// while the database is down nobody leads, and the changefeeds keep
// replicating; when it is back a coordinator is elected again. At every
// look there is at most one coordinator; nothing is lost.
func TestMySQLElectedClusterFailsOverAndOutlivesADatabaseRestart(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.Start(t, "cdc")
	tc := newTestCluster(t)
	// A lock of 5 s: a MariaDB on a starved CI machine once left a 3 s
	// lock unrenewed while the changefeeds were being created.
	tc.electionDSN, tc.electionTTL = dsn, 5*time.Second
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sinks := tc.createFeeds(c, 3)
	// The coordinator to crash is the one elected now: a term may have
	// ended meanwhile (a renewal the database did not answer in time),
	// which is the election working, not failing.
	var first meta.Leader
	tc.eventually("a coordinator elected through mysql, as the API reports it", time.Minute, func() bool {
		first = tc.waitLeader()
		status, err := c.Status(ctx)
		return err == nil && status.Coordinator == string(first.Node) && status.Election == "mysql" && status.ElectionEpoch > 0
	})
	time.Sleep(2 * time.Second) // load before the crash

	tc.crash(first.Node)
	c = tc.client()
	next := tc.waitLeader()
	if next.Node == first.Node || next.Fence.Epoch() <= first.Fence.Epoch() {
		t.Fatalf("after the coordinator's crash: %s (epoch %d), before %s (epoch %d)", next.Node, next.Fence.Epoch(), first.Node, first.Fence.Epoch())
	}

	// MariaDB goes away: the coordinator steps down, nobody leads, and
	// the changefeeds go on.
	before := tc.checkpointOf(c, "cf00")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	tc.eventually("no coordinator while the election database is down", 20*time.Second, func() bool {
		_, ok := tc.leader()
		return !ok
	})
	tc.eventually("the changefeed to advance without a coordinator", 20*time.Second, func() bool {
		return tc.checkpointOf(c, "cf00") > before+model.TsFromMillis(1000)
	})
	if _, ok := tc.leader(); ok {
		t.Fatal("a coordinator while the election database is down")
	}
	if err := srv.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	back := tc.waitLeader()
	if back.Fence.Epoch() <= next.Fence.Epoch() {
		t.Fatalf("the term after the restart (%d) is not above the one before (%d)", back.Fence.Epoch(), next.Fence.Epoch())
	}
	t.Logf("coordinators: %s, %s after the crash, %s after the database restart", first.Node, next.Node, back.Node)
	tc.verifyAll(c, sinks, false)
}

// checkpointOf is a changefeed's checkpoint as the API shows it.
func (tc *testCluster) checkpointOf(c *api.Client, cf string) model.Ts {
	tc.t.Helper()
	got, err := c.Changefeed(context.Background(), cf)
	if err != nil {
		tc.t.Fatal(err)
	}
	return model.Ts(got.CheckpointTs)
}
