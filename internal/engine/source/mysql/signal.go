package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	driver "github.com/go-sql-driver/mysql"
)

// The changefeed's own rows in the signal table (its ticks, the
// snapshot's watermarks, verify's cuts, the marks of tables to copy
// again) reach its reader only as rows: a session's binlog_format and
// binlog_row_image are the server's global ones as they were when it
// connected, and an operator who sets them otherwise after the
// changefeed's creation (its preflight checked them) would have those
// rows logged as statements, or without the columns the reader reads.
// Every chunk's watermarks then "did not arrive", for ever, and nothing
// said why. The sessions that write them are set to ROW and FULL, or
// refused with what to do where the user may not set them.

// signalDB is a pool whose sessions log the rows they write as the
// changefeed's reader needs them (rowsLogged); nothing connects before
// the first use.
func signalDB(cfg Config) (*sql.DB, error) {
	dc, err := driver.ParseDSN(cfg.DSN())
	if err != nil {
		return nil, explain(cfg, err)
	}
	inner, err := driver.NewConnector(dc)
	if err != nil {
		return nil, explain(cfg, err)
	}
	return sql.OpenDB(rowSessions{inner}), nil
}

// openSignal is signalDB, connected.
func openSignal(ctx context.Context, cfg Config) (*sql.DB, error) {
	db, err := signalDB(cfg)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, explain(cfg, err)
	}
	return db, nil
}

// rowsRefused says why the changefeed's own sessions cannot log whole
// rows ("" when they can): the server's settings changed since its
// creation and the user may not set them for its sessions. Its snapshot's
// chunks, ticks and verify's cuts then wait, and the reader's log says so
// every 30 s; 'changefeed get' says it too. Only where the server's
// settings are not ROW and FULL does it connect as those sessions do.
func rowsRefused(ctx context.Context, db *sql.DB, cfg Config) string {
	var format, image string
	if err := db.QueryRowContext(ctx, "SELECT @@global.binlog_format, @@global.binlog_row_image").Scan(&format, &image); err != nil ||
		strings.EqualFold(format, "ROW") && strings.EqualFold(image, "FULL") {
		return ""
	}
	sdb, err := openSignal(ctx, cfg)
	if err == nil {
		sdb.Close()
		return ""
	}
	if !strings.Contains(err.Error(), "binlog_row_image") {
		return "" // not the settings (the server unreachable: said otherwise)
	}
	return err.Error() + " (until then the snapshot's chunks, the ticks and verify's cuts wait: the changefeed's lag grows)"
}

// rowSessions connects as its driver does, then makes the session log
// rows (rowsLogged).
type rowSessions struct{ sqldriver.Connector }

func (c rowSessions) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := rowsLogged(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// rowsLogged makes a new session log whole rows: nothing to do where the
// server's settings are ROW and FULL, else it sets them for the session,
// or says why it cannot and what to do.
func rowsLogged(ctx context.Context, conn sqldriver.Conn) error {
	q, ok := conn.(sqldriver.QueryerContext)
	x, ok2 := conn.(sqldriver.ExecerContext)
	if !ok || !ok2 {
		return fmt.Errorf("the MySQL driver cannot run a query on its own (%T)", conn)
	}
	rows, err := q.QueryContext(ctx, "SELECT @@session.binlog_format, @@session.binlog_row_image", nil)
	if err != nil {
		return err
	}
	vals := make([]sqldriver.Value, 2)
	err = rows.Next(vals)
	rows.Close()
	if err == io.EOF {
		return fmt.Errorf("the server did not say its binlog_format")
	} else if err != nil {
		return err
	}
	format, image := fmt.Sprintf("%s", vals[0]), fmt.Sprintf("%s", vals[1])
	if strings.EqualFold(format, "ROW") && strings.EqualFold(image, "FULL") {
		return nil
	}
	// Only what differs: each may need its own privilege.
	var set []string
	if !strings.EqualFold(format, "ROW") {
		set = append(set, "binlog_format = 'ROW'")
	}
	if !strings.EqualFold(image, "FULL") {
		set = append(set, "binlog_row_image = 'FULL'")
	}
	if _, err := x.ExecContext(ctx, "SET SESSION "+strings.Join(set, ", "), nil); err != nil {
		if me := (*driver.MySQLError)(nil); !errors.As(err, &me) || me.Number != 1227 {
			// Not the privilege (the connection dropped, a timeout):
			// said as it is (rowsRefused tells them apart by this).
			return fmt.Errorf("make the changefeed's session log whole rows: %w", err)
		}
		return fmt.Errorf("the server's binlog_format is %s and its binlog_row_image %s, changed since the changefeed was created: its own rows in the signal table (ticks, the snapshot's watermarks, verify's cuts) would reach its reader without their rows, and this user may not set them for its sessions (%v; that needs BINLOG ADMIN on MariaDB, SESSION_VARIABLES_ADMIN on MySQL). Set them back on the server: SET GLOBAL binlog_format = ROW, binlog_row_image = FULL (and in its configuration file); the changefeed goes on by itself", format, image, err)
	}
	return nil
}
