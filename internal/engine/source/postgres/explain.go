package postgres

// What an error of PostgreSQL or of the way to it means, said with what
// to check or change, PostgreSQL's own words kept: the one place a
// SQLSTATE becomes advice, and where an error is marked worth a retry
// (model.Unreachable).

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/model"
)

// explain turns a connection or server error into one that says what to
// check, keeping PostgreSQL's own words.
func explain(cfg Config, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "28P01" || pgErr.Code == "28000":
			return fmt.Errorf("PostgreSQL refused the login: %s; check the user and password in the source URI, and pg_hba.conf", pgErr.Message)
		case pgErr.Code == "3D000":
			return fmt.Errorf("PostgreSQL: %s; check the database name in the source URI", pgErr.Message)
		case pgErr.Code == "42501":
			return fmt.Errorf("PostgreSQL: %s (permission denied); grant the user the rights it needs, or connect as the tables' owner", pgErr.Message)
		case pgErr.Code == "22023" && strings.Contains(pgErr.Message, `"TimeZone"`):
			return fmt.Errorf("PostgreSQL: %s; give the source URI's timezone= a zone the server knows (SELECT name FROM pg_timezone_names), such as UTC", pgErr.Message)
		case pgErr.Code == "57P03":
			// The database system is starting up, or shutting down.
			return model.Unreachable(fmt.Errorf("PostgreSQL: %s; try again once it runs", pgErr.Message))
		case pgErr.Code == "53300":
			// Too many connections, or every walsender taken (a reader
			// killed a moment ago still holds its own until
			// wal_sender_timeout): worth trying again, not the
			// connection's fault (an update's check answers 503).
			return model.Unreachable(fmt.Errorf("PostgreSQL: %s; try again once a connection is free, or raise %s", pgErr.Message, connectionLimit(pgErr.Message)))
		case pgErr.Code == "53400" || pgErr.Code == "55000" && strings.Contains(pgErr.Message, "replication slot") && !strings.Contains(pgErr.Detail, "invalidated") && !strings.Contains(pgErr.Message, "can no longer get changes"):
			return fmt.Errorf("PostgreSQL: %s; raise max_replication_slots / max_wal_senders, or drop unused slots", pgErr.Message)
		}
		hint := ""
		if pgErr.Hint != "" {
			hint = " (" + pgErr.Hint + ")"
		}
		return fmt.Errorf("PostgreSQL: %s%s [SQLSTATE %s]", pgErr.Message, hint, pgErr.Code)
	}
	host := "the server"
	if c, perr := pgconn.ParseConfig(cfg.ConnString); perr == nil {
		host = fmt.Sprintf("%s:%d", c.Host, c.Port)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		if model.DialFailed(err) {
			// Only a dial that failed is worth retrying as it is; a host
			// that does not resolve or a TLS refusal needs the URI fixed.
			return model.Unreachable(fmt.Errorf("cannot reach PostgreSQL at %s: %v; check the host and port in the source URI and that PostgreSQL listens there (listen_addresses)", host, unwrapConnect(err)))
		}
		return fmt.Errorf("cannot connect to PostgreSQL at %s: %v; check the source URI's host name and its TLS settings (sslmode, sslrootcert) against the server's", host, unwrapConnect(err))
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		// Connected, then the connection was lost or a request timed
		// out: the server restarting, a proxy failing over, or a wait
		// upstream (a slot's creation waits for the transactions open
		// when it began). Worth the same request again.
		return model.Unreachable(fmt.Errorf("lost PostgreSQL at %s in the middle of a request: %v; try again (a replication slot's creation waits for the transactions open upstream to end: see pg_stat_activity)", host, err))
	}
	return err
}

// unwrapConnect keeps the innermost reason of a connection failure,
// without the connection string pgx puts in front of it.
func unwrapConnect(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// connectionLimit names the limit a 53300 (too many connections) ran
// into, from PostgreSQL's words.
func connectionLimit(msg string) string {
	switch {
	case strings.Contains(msg, "max_wal_senders"):
		return "max_wal_senders"
	case strings.Contains(msg, "for role"):
		return "the role's CONNECTION LIMIT (ALTER ROLE … CONNECTION LIMIT n)"
	case strings.Contains(msg, "for database"):
		return "the database's CONNECTION LIMIT (ALTER DATABASE … CONNECTION LIMIT n)"
	}
	return "max_connections"
}
