package playground

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// demoDB is the playground's PostgreSQL: a private server in the
// playground's directory, database demo, and a small live workload of
// inserts, updates and deletes, for the demo-pg changefeed.
type demoDB struct {
	srv    *pgserver.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// demoTables are the tables demo-pg replicates.
// audit has no primary key: it is one partition that cannot be split.
const demoTables = "public.accounts,public.transfers,public.audit"

// startDemoDB starts the server (initialising it on first use) and the
// workload.
func startDemoDB(ctx context.Context, dir string, port int) (*demoDB, error) {
	srv, err := pgserver.Start(ctx, filepath.Join(dir, "postgres"), port)
	if err != nil {
		return nil, fmt.Errorf("start the playground's PostgreSQL: %w", err)
	}
	out, err := srv.Psql(ctx, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'demo'")
	if err == nil && strings.TrimSpace(out) == "0" {
		_, err = srv.Psql(ctx, "postgres", "CREATE DATABASE demo")
	}
	if err == nil {
		_, err = srv.Psql(ctx, "demo", `
CREATE TABLE IF NOT EXISTS accounts (id int8 PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL, updated_at timestamptz);
CREATE TABLE IF NOT EXISTS transfers (id int8 PRIMARY KEY, from_id int8, to_id int8, amount numeric(12,2), at timestamptz);
CREATE TABLE IF NOT EXISTS audit (event text NOT NULL, amount numeric(12,2));
ALTER TABLE audit REPLICA IDENTITY FULL;
-- Rows that exist before demo-pg, so that its initial snapshot copies
-- something (only on the database's first start).
INSERT INTO accounts SELECT g, 'owner-' || g, 1000, now() FROM generate_series(1, 1000) g WHERE NOT EXISTS (SELECT 1 FROM accounts);
INSERT INTO transfers SELECT g, 1 + g % 1000, 1 + (g * 7) % 1000, 1 + g % 50, now() - g * interval '1 second' FROM generate_series(1, 5000) g WHERE NOT EXISTS (SELECT 1 FROM transfers);
INSERT INTO audit SELECT 'seed', g % 50 FROM generate_series(1, 500) g WHERE NOT EXISTS (SELECT 1 FROM audit);`)
	}
	if err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("prepare the playground's demo database: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	d := &demoDB{srv: srv, cancel: cancel, done: make(chan struct{})}
	go d.workload(wctx)
	return d, nil
}

// sourceURI is demo-pg's source.
func (d *demoDB) sourceURI() string { return d.srv.DSN("demo") + "&tables=" + demoTables }

// stop ends the workload, then the server.
func (d *demoDB) stop() {
	d.cancel()
	<-d.done
	_ = d.srv.Stop()
}

// workload moves money between accounts about 20 times a second: a
// transfer row, two balance updates; now and then a new account, and old
// transfers deleted.
func (d *demoDB) workload(ctx context.Context) {
	defer close(d.done)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, d.srv.DSN("demo"))
			if err != nil {
				continue // PostgreSQL restarting: try again on the next tick
			}
			conn = c
		}
		if err := transfer(ctx, conn, rng); err != nil && ctx.Err() == nil {
			_ = conn.Close(context.Background())
			conn = nil
		}
	}
}

func transfer(ctx context.Context, conn *pgx.Conn, rng *rand.Rand) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM accounts`).Scan(&n); err != nil {
		return err
	}
	if n < 10 || rng.Intn(20) == 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO accounts SELECT coalesce(max(id), 0) + 1, 'owner-' || (coalesce(max(id), 0) + 1), 1000, now() FROM accounts`); err != nil {
			return err
		}
	}
	amount := fmt.Sprintf("%d.%02d", rng.Intn(50), rng.Intn(100))
	_, err = tx.Exec(ctx, `
WITH pair AS (SELECT (SELECT id FROM accounts ORDER BY random() LIMIT 1) AS a, (SELECT id FROM accounts ORDER BY random() LIMIT 1) AS b),
     t AS (INSERT INTO transfers SELECT coalesce((SELECT max(id) FROM transfers), 0) + 1, a, b, $1::numeric, now() FROM pair RETURNING from_id, to_id)
UPDATE accounts SET balance = balance + CASE WHEN accounts.id = t.to_id THEN $1::numeric ELSE -$1::numeric END, updated_at = now()
FROM t WHERE accounts.id IN (t.from_id, t.to_id) AND t.from_id <> t.to_id`, amount)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO audit VALUES ('transfer', $1::numeric)`, amount); err != nil {
		return err
	}
	if rng.Intn(10) == 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM audit WHERE ctid IN (SELECT ctid FROM audit LIMIT 5) AND (SELECT count(*) FROM audit) > 200`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM transfers WHERE id IN (SELECT id FROM transfers ORDER BY id LIMIT 5) AND (SELECT count(*) FROM transfers) > 200`); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// createDemoPG creates changefeed demo-pg (unless an earlier run in the
// same directory did) and returns its sink.
func createDemoPG(ctx context.Context, servers []string, root string, db *demoDB, sec *secure) (string, error) {
	// One partition per table: the demo's tables are small, and an
	// operator splits them as they grow.
	return createFeed(ctx, servers, sec, api.ChangefeedCreateRequest{ID: "demo-pg", Source: db.sourceURI(), PartitionsPerTable: 1}, root)
}
