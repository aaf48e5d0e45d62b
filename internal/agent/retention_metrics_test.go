package agent

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A MySQL changefeed's metrics say how long before its binary log
// position is purged, 0 or below once it is, and reading them asks the
// server for nothing else: before, the node read them through the status
// of 'changefeed get', whose warnings (XA RECOVER, the cascading foreign
// keys from the catalog) ran for every changefeed every 30 s, and
// without the changefeed's position a purge never showed.
func TestAMySQLChangefeedsHeadroomIsOnMetricsAndAsksTheServerNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "SET GLOBAL binlog_expire_logs_seconds = 86400",
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, v VARCHAR(200))",
		"CREATE TABLE items (id BIGINT PRIMARY KEY, order_id BIGINT, FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE)")
	tc := newTestCluster(t)
	tc.retentionEvery = 100 * time.Millisecond
	leader := tc.startCaptures(1)
	c := tc.client()
	if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "shop",
		Source: "mysql://root@" + srv.Addr() + "/shop?tables=orders,items&snapshot=never",
		Sink:   "file://" + t.TempDir() + "?flush-interval=100ms"}); err != nil {
		t.Fatal(err)
	}
	addr := tc.nodes[leader.Node].addr
	headroom := `cdcctl_source_retention_headroom_seconds{changefeed="shop"}`
	tc.eventually("the headroom on /metrics", 30*time.Second, func() bool {
		h := metricValue(tc.get(addr, "/metrics"), headroom)
		return h > 86400-120 && h <= 86400
	})
	// A slot's WAL, PostgreSQL's: MySQL's binary log is the server's,
	// purged by age (its alert would tell an operator to drop a slot).
	if v := metricValue(tc.get(addr, "/metrics"), `cdcctl_source_retained_bytes{changefeed="shop"}`); v != -1 {
		t.Errorf("a MySQL changefeed exports cdcctl_source_retained_bytes %v", v)
	}
	xaBefore := globalStatus(t, db, "Com_xa_recover")
	rounds := globalStatus(t, db, "Com_show_binlogs")
	tc.eventually("ten rounds of the watch", 30*time.Second, func() bool {
		return globalStatus(t, db, "Com_show_binlogs") >= rounds+10
	})
	if got := globalStatus(t, db, "Com_xa_recover"); got != xaBefore {
		t.Errorf("the server was asked XA RECOVER %d times in ten rounds of the watch: the metrics read the status's warnings too", got-xaBefore)
	}

	// Paused, its binary log purged: the headroom says it is gone,
	// though the changefeed is a second behind.
	if _, err := c.PauseChangefeed(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	mysqltest.PurgeBinaryLogs(t, db)
	tc.eventually("the headroom at 0 or below", 30*time.Second, func() bool {
		return metricValue(tc.get(addr, "/metrics"), headroom) <= 0
	})
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
