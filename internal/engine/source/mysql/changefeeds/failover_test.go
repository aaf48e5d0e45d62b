package changefeeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A changefeed created on a primary goes on on its replica after a
// failover, as operators run one: the source's address (here a proxy
// on loopback, as a virtual IP or a DNS name is) leads to the replica
// once the primary is gone. The binary log file and offset of the
// primary mean nothing there; the changefeed's position also names the
// transactions it passed by GTID (MariaDB's domain-server-seq, kept with
// every resume point), and its reader resumes by them on the replica.
// While the primary copies existing rows and takes a live workload, the
// replica follows it; the workload stops, the replica catches up, the
// primary is stopped, the replica promoted, and the workload goes on
// there. Before the failover a DBA wrote on the replica itself, in a
// GTID domain of its own that the changefeed's position never had (an
// errant transaction): those rows are the new primary's and arrive too.
// The tables rebuilt from the sink equal the new primary's, and nothing
// was written twice.
func TestAChangefeedGoesOnOnTheReplicaAfterAFailover(t *testing.T) {
	t.Parallel()
	const existing = 400
	primary, pdb := mysqltest.StartShop(t)
	replica := startReplica(t, primary)
	createShop(t, pdb, existing)
	addr := startProxy(t, primary.Addr())

	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	uri := "mysql://root@" + addr.Addr() + "/shop?tables=orders,items&chunk-rows=40"
	tc.CreateChangefeed("my", uri, "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	w := startShopWorkload(t, pdb, existing)
	tc.WaitSnapshot("my")
	tc.WaitCheckpoint("my", model.TsFromTime(time.Now().Add(time.Second)))
	before := w.finish(t)
	tc.WaitCheckpoint("my", model.TsFromTime(before))
	onPrimary := storedPosition(t, tc)
	if onPrimary.Server != 1 || !strings.HasPrefix(onPrimary.GTID, "0-1-") {
		t.Fatalf("the position on the primary: %+v; want server 1 and a GTID of domain 0", onPrimary)
	}

	// The failover: the replica has every transaction of the primary's,
	// the primary goes away, the address leads to the replica, which is
	// promoted.
	var pos string
	if err := pdb.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	rdb := mysqltest.Open(t, replica.DSN("shop"))
	var waited int
	if err := rdb.QueryRow("SELECT MASTER_GTID_WAIT(?, 60)", pos).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("the replica did not catch up with %s: %d, %v", pos, waited, err)
	}
	// Errant transactions: written on the replica itself, in a domain of
	// its own (a fix a DBA made there), never on the primary. They are
	// the new primary's rows once it is promoted.
	errant := mysqltest.Open(t, replica.DSN("shop"))
	errant.SetMaxOpenConns(1)
	mysqltest.Exec(t, errant, "SET SESSION gtid_domain_id = 7",
		"INSERT INTO orders VALUES (900001, 'errant', 1.00, 'on the replica', NOW(6))",
		"UPDATE orders SET note = 'fixed on the replica' WHERE id = (SELECT MIN(id) FROM (SELECT id FROM orders) o)")
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	addr.switchTo(replica.Addr())
	mysqltest.Exec(t, rdb, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0")
	t.Logf("failed over from the primary at %s to the replica", pos)

	live, next := ordersOf(t, rdb)
	// The workload leaves the errant rows as they are, so that the
	// tables compared below show whether they arrived.
	fixed := live[0]
	live = slices.DeleteFunc(live, func(id int64) bool { return id == fixed || id == 900001 })
	w = startShopWorkloadOn(t, rdb, live, next)
	tc.Eventually("the changefeed to go on on the replica", 60*time.Second, func() bool {
		p := storedPosition(t, tc)
		return p.Server == 2 && strings.Contains(p.GTID, "0-2-")
	})
	time.Sleep(2 * time.Second)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders", "shop.items"}, w.finish(t))
	if !rep.OK || rep.Duplicates != 0 || w.n < 10 {
		t.Fatalf("after %d transactions on the replica: %+v", w.n, rep)
	}
	if st := tc.Changefeed("my").Status; st.State != model.ChangefeedNormal {
		t.Fatalf("the changefeed after the failover: %+v", st)
	}
	after := storedPosition(t, tc)
	if !strings.Contains(after.GTID, "7-2-") {
		t.Fatalf("the position on the new primary %q has no GTID of the errant transactions' domain 7", after.GTID)
	}
	t.Logf("position on the primary %s:%d GTID %s; on the replica %s:%d GTID %s; %d transactions after; %+v",
		onPrimary.File, onPrimary.Pos, onPrimary.GTID, after.File, after.Pos, after.GTID, w.n, rep.TableReports)
}

// storedPosition is the changefeed's stored resume point, as the source
// writes it.
func storedPosition(t *testing.T, tc *enginetest.Cluster) struct {
	File   string `json:"file"`
	Pos    uint32 `json:"pos"`
	GTID   string `json:"gtid"`
	Server uint32 `json:"server"`
} {
	t.Helper()
	var p struct {
		File   string `json:"file"`
		Pos    uint32 `json:"pos"`
		GTID   string `json:"gtid"`
		Server uint32 `json:"server"`
	}
	if err := json.Unmarshal(tc.Changefeed("my").Status.SourcePosition, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startReplica starts a MariaDB replicating from primary by GTID from
// its first transaction, writing what it applies into its own binary log
// (log_slave_updates), as a replica that can become the primary does.
func startReplica(t *testing.T, primary *mysqlserver.Server) *mysqlserver.Server {
	t.Helper()
	srv, err := mysqlserver.StartWith(context.Background(), t.TempDir(), 0, mysqlserver.Options{Binlog: true, Args: []string{"--server-id=2", "--log-slave-updates"}})
	if err != nil {
		t.Fatal(err) // the primary started: MariaDB is installed
	}
	t.Cleanup(func() { _ = srv.Stop() })
	host, port, _ := net.SplitHostPort(primary.Addr())
	db := mysqltest.Open(t, srv.DSN(""))
	mysqltest.Exec(t, db, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='root', MASTER_USE_GTID=slave_pos", host, port), "START SLAVE")
	return srv
}

// createShop creates orders and items with existing rows each.
func createShop(t *testing.T, db *sql.DB, existing int) {
	t.Helper()
	mysqltest.Exec(t, db,
		`CREATE TABLE orders (id BIGINT PRIMARY KEY, region VARCHAR(8) NOT NULL, amount DECIMAL(10,2), note TEXT, at DATETIME(6))`,
		`CREATE TABLE items (sku VARCHAR(32), line INT, qty INT NOT NULL, PRIMARY KEY (sku, line))`)
	for id := 1; id <= existing; id++ {
		mysqltest.Exec(t, db,
			fmt.Sprintf("INSERT INTO orders VALUES (%d, 'eu', %d.50, 'n', NOW(6))", id, id),
			fmt.Sprintf("INSERT INTO items VALUES ('sku-%d', %d, 1)", id%50, id))
	}
}

// ordersOf lists the orders a table holds, and the id after the last.
func ordersOf(t *testing.T, db *sql.DB) ([]int64, int64) {
	t.Helper()
	rows, err := db.Query("SELECT id FROM orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var live []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		live = append(live, id)
	}
	if err := rows.Err(); err != nil || len(live) == 0 {
		t.Fatalf("orders: %d, %v", len(live), err)
	}
	return live, live[len(live)-1] + 1
}

// proxy forwards loopback connections to a server it can be switched
// from, closing the connections it forwarded: what a virtual IP moved to
// another server does to its clients.
type proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		ln.Close()
		p.switchTo("")
	})
	go p.serve()
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		u, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, u); u.Close(); c.Close() }()
	}
}

// switchTo leads new connections to target and closes the ones open.
func (p *proxy) switchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}
