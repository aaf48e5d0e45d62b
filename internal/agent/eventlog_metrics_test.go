package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// An operator sees how much each database changefeed's event log takes
// on the capture that runs its reader (a log held by a partition that
// does not advance fills the disk), and it grows with what is written
// upstream.
func TestTheEventLogsSizeIsOnMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := pgtest.Start(t, "CREATE TABLE orders (id int8 PRIMARY KEY, v text)")
	tc := newTestCluster(t)
	leader := tc.startCaptures(1)
	if _, err := tc.client().CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "orders", Source: pg.DSN("postgres") + "&tables=public.orders",
		Sink: "file://" + t.TempDir() + "?flush-interval=100ms"}); err != nil {
		t.Fatal(err)
	}
	series := `cdcctl_eventlog_bytes{changefeed="orders"}`
	addr := tc.nodes[leader.Node].addr
	var before float64
	tc.eventually("the event log on /metrics", 30*time.Second, func() bool {
		before = metricValue(tc.get(addr, "/metrics"), series)
		return before > 0
	})
	if _, err := pg.Psql(ctx, "postgres", fmt.Sprintf("INSERT INTO orders SELECT g, repeat('x', 200) FROM generate_series(1, %d) g", 20000)); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the event log to grow with 20,000 rows", 30*time.Second, func() bool {
		return metricValue(tc.get(addr, "/metrics"), series) > before+1_000_000
	})
}
