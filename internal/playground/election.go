package playground

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
)

// CheckElectionFlags refuses an --election that is not a backend, or an
// --election-dsn that does not parse (usage errors).
func CheckElectionFlags(cfg Config) error {
	switch cfg.Election {
	case "", "etcd":
		if cfg.ElectionDSN != "" {
			return errors.New("--election-dsn is for --election mysql")
		}
	case "mysql":
		if cfg.ElectionDSN != "" {
			if _, err := election.ParseMySQLDSN(cfg.ElectionDSN); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("--election %q: use etcd (default) or mysql", cfg.Election)
	}
	return nil
}

// checkElectionDB refuses a bad --election-dsn, or a server that does not
// answer, before any agent starts.
func checkElectionDB(ctx context.Context, dsn string) error {
	e, err := election.NewMySQL(election.MySQLConfig{DSN: dsn})
	if err != nil {
		return err
	}
	defer e.Close()
	return e.Prepare(ctx)
}

// startElectionDB starts the playground's private MariaDB for the
// coordinator election (--election mysql) on port, with its data in
// DIR/mariadb, and a database cdcctl for the lock table.
func startElectionDB(ctx context.Context, dir string, port int) (*mysqlserver.Server, error) {
	if err := portFree(port); err != nil {
		return nil, fmt.Errorf("port %d (the playground's MariaDB) is taken (%v); pick other ports with --port-base, or give --election-dsn", port, err)
	}
	srv, err := mysqlserver.Start(ctx, filepath.Join(dir, "mariadb"), port)
	if err != nil {
		return nil, fmt.Errorf("start the playground's MariaDB: %w", err)
	}
	if _, err := srv.CreateDatabase(ctx, "cdcctl"); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("prepare the playground's election database: %w", err)
	}
	return srv, nil
}

// redactPassword hides a DSN's password for playground.json and the banner.
func redactPassword(dsn string) string {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	if dc.Passwd != "" {
		dc.Passwd = "xxxxx"
	}
	return dc.FormatDSN()
}
