package playground

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
)

// demoMySQL is the playground's MariaDB for demo-mysql (--mysql): a
// private server with its binary log on, database demo, and a small live
// workload.
type demoMySQL struct {
	srv    *mysqlserver.Server
	db     *sql.DB
	cancel context.CancelFunc
	done   chan struct{}
}

// demoMySQLTables are the tables demo-mysql replicates.
const demoMySQLTables = "demo.accounts,demo.transfers"

// startDemoMySQL starts the server (initialising it on first use) and
// its tables; run starts the workload once demo-mysql exists. The tables
// start empty and nothing writes them before: demo-mysql replicates
// changes from its creation on (the MySQL source copies no existing rows
// yet), so every row the workload writes is in its sink.
func startDemoMySQL(ctx context.Context, dir string, port int) (*demoMySQL, error) {
	if err := portFree(port); err != nil {
		return nil, fmt.Errorf("port %d (the playground's MariaDB for demo-mysql) is taken (%v); pick other ports with --port-base", port, err)
	}
	srv, err := mysqlserver.StartWith(ctx, filepath.Join(dir, "mariadb-demo"), port, mysqlserver.Options{Binlog: true})
	if err != nil {
		return nil, fmt.Errorf("start the playground's MariaDB: %w", err)
	}
	dsn, err := srv.CreateDatabase(ctx, "demo")
	var db *sql.DB
	if err == nil {
		db, err = sql.Open("mysql", dsn)
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS accounts (id BIGINT PRIMARY KEY, owner VARCHAR(64) NOT NULL, balance DECIMAL(12,2) NOT NULL, updated_at DATETIME(6))`,
		`CREATE TABLE IF NOT EXISTS transfers (id BIGINT PRIMARY KEY, from_id BIGINT, to_id BIGINT, amount DECIMAL(12,2), at DATETIME(6))`,
	} {
		if err != nil {
			break
		}
		_, err = db.ExecContext(ctx, stmt)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		_ = srv.Stop()
		return nil, fmt.Errorf("prepare the playground's demo database in MariaDB: %w", err)
	}
	return &demoMySQL{srv: srv, db: db}, nil
}

// run starts the workload.
func (d *demoMySQL) run() {
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan struct{})
	go d.workload(ctx)
}

// sourceURI is demo-mysql's source.
func (d *demoMySQL) sourceURI() string {
	return "mysql://root@" + d.srv.Addr() + "/demo?tables=" + demoMySQLTables + "&snapshot=never"
}

// stop ends the workload, then the server.
func (d *demoMySQL) stop() {
	if d.cancel != nil {
		d.cancel()
		<-d.done
	}
	d.db.Close()
	_ = d.srv.Stop()
}

// workload moves money between accounts about 20 times a second, as the
// PostgreSQL demo's does: a transfer row and two balance updates; new
// accounts now and then, old transfers deleted.
func (d *demoMySQL) workload(ctx context.Context) {
	defer close(d.done)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// An error (the server restarting) is tried again on the next tick.
		_ = mysqlTransfer(ctx, d.db, rng)
	}
}

func mysqlTransfer(ctx context.Context, db *sql.DB, rng *rand.Rand) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit, nothing to roll back
	var n, maxID int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(max(id), 0) FROM accounts`).Scan(&n, &maxID); err != nil {
		return err
	}
	if n < 10 || rng.Intn(20) == 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO accounts VALUES (?, ?, 1000, NOW(6))`, maxID+1, fmt.Sprintf("owner-%d", maxID+1)); err != nil {
			return err
		}
		maxID++
	}
	from, to := 1+rng.Int63n(maxID), 1+rng.Int63n(maxID)
	amount := fmt.Sprintf("%d.%02d", rng.Intn(50), rng.Intn(100))
	if _, err := tx.ExecContext(ctx, `INSERT INTO transfers SELECT coalesce(max(id), 0) + 1, ?, ?, ?, NOW(6) FROM transfers`, from, to, amount); err != nil {
		return err
	}
	if from != to {
		for _, u := range []struct {
			id   int64
			sign string
		}{{from, "-"}, {to, "+"}} {
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance `+u.sign+` ?, updated_at = NOW(6) WHERE id = ?`, amount, u.id); err != nil {
				return err
			}
		}
	}
	if rng.Intn(10) == 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM transfers WHERE id <= (SELECT m FROM (SELECT max(id) - 200 AS m FROM transfers) x) ORDER BY id LIMIT 5`); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// createDemoMySQL creates changefeed demo-mysql (unless an earlier run in
// the same directory did) and returns its sink.
func createDemoMySQL(ctx context.Context, servers []string, root string, d *demoMySQL, sec *secure) (string, error) {
	// One partition per table: the demo's tables are small, and an
	// operator splits them as they grow.
	return createFeed(ctx, servers, sec, api.ChangefeedCreateRequest{ID: "demo-mysql", Source: d.sourceURI(), PartitionsPerTable: 1}, root)
}

// mysqlHint is demo-mysql's line of the banner.
func mysqlHint(uri, sink string) hint {
	return hint{"cdcctl changefeed get demo-mysql", "MariaDB (" + strings.Split(uri, "?")[0] + ") into " + strings.TrimPrefix(strings.Split(sink, "?")[0], "file://")}
}
