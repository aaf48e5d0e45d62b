package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
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
	tc.electionDSN, tc.electionTTL = dsn, 3*time.Second
	first := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sinks := tc.createFeeds(c, 3)
	status, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Coordinator != string(first.Node) || status.Election != "mysql" || status.ElectionEpoch == 0 {
		t.Fatalf("cluster status: coordinator %q, election %q epoch %d; want %s elected through mysql", status.Coordinator, status.Election, status.ElectionEpoch, first.Node)
	}
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
