package agent

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A MySQL changefeed's metrics say how much binary log the server keeps
// from the changefeed's position on and how long before that position is
// purged, and reading them asks the server for nothing else: before,
// the node read them through the status of 'changefeed get', whose
// warnings (XA RECOVER, the cascading foreign keys from the catalog)
// ran for every changefeed every 30 s, and without the changefeed's
// position the kept binary log read 0.
func TestAMySQLChangefeedsRetentionIsOnMetricsAndAsksTheServerNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "SET GLOBAL binlog_expire_logs_seconds = 86400",
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, v VARCHAR(200))",
		"CREATE TABLE items (id BIGINT PRIMARY KEY, order_id BIGINT, FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE)")
	tc := newTestCluster(t)
	tc.retentionEvery = 100 * time.Millisecond
	leader := tc.startCaptures(1)
	if _, err := tc.client().CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "shop",
		Source: "mysql://root@" + srv.Addr() + "/shop?tables=orders,items&snapshot=never",
		Sink:   "file://" + t.TempDir() + "?flush-interval=100ms"}); err != nil {
		t.Fatal(err)
	}
	addr := tc.nodes[leader.Node].addr
	kept, headroom := `cdcctl_source_retained_bytes{changefeed="shop"}`, `cdcctl_source_retention_headroom_seconds{changefeed="shop"}`
	var before float64
	tc.eventually("the kept binary log and the headroom on /metrics", 30*time.Second, func() bool {
		body := tc.get(addr, "/metrics")
		before = metricValue(body, kept)
		h := metricValue(body, headroom)
		return before > 0 && h > 86400-120 && h <= 86400
	})
	xaBefore := globalStatus(t, db, "Com_xa_recover")
	for i := range 20 {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO orders VALUES (%d, REPEAT('x', 200))", i))
	}
	// The binary log written since is the changefeed's to keep: the
	// rounds go on, with its position.
	tc.eventually("the kept binary log to grow with 20 inserts", 30*time.Second, func() bool {
		return metricValue(tc.get(addr, "/metrics"), kept) >= before+20*200
	})
	time.Sleep(500 * time.Millisecond) // a few more rounds
	if got := globalStatus(t, db, "Com_xa_recover"); got != xaBefore {
		t.Errorf("the server was asked XA RECOVER %d times while the node read the retention: the metrics read the status's warnings too", got-xaBefore)
	}
}

// A PostgreSQL changefeed's metric says how much WAL its slot holds.
func TestAPostgreSQLChangefeedsSlotIsOnMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := pgtest.Start(t, "CREATE TABLE orders (id int8 PRIMARY KEY, v text)")
	tc := newTestCluster(t)
	tc.retentionEvery = 100 * time.Millisecond
	leader := tc.startCaptures(1)
	if _, err := tc.client().CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "orders", Source: pg.DSN("postgres") + "&tables=public.orders&snapshot=never",
		Sink: "file://" + t.TempDir() + "?flush-interval=100ms"}); err != nil {
		t.Fatal(err)
	}
	addr := tc.nodes[leader.Node].addr
	tc.eventually("the slot's WAL on /metrics", 30*time.Second, func() bool {
		return metricValue(tc.get(addr, "/metrics"), `cdcctl_source_retained_bytes{changefeed="orders"}`) > 0
	})
}

// globalStatus is one of the server's status counters.
func globalStatus(t *testing.T, db *sql.DB, name string) int64 {
	t.Helper()
	var n string
	var v int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
