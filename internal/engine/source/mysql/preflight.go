package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	driver "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Server is what the preflight read of a server.
type Server struct {
	// Flavor is "mariadb" or "mysql".
	Flavor  string
	Version string
	// ServerID is the server's own server_id.
	ServerID uint32
	// GTID says positions can be GTID sets: always on MariaDB, gtid_mode
	// ON on MySQL.
	GTID bool
	// RetentionSeconds is how long the server keeps binary logs (0: for
	// ever, until purged by hand).
	RetentionSeconds int64
	// FoldsNames: lower_case_table_names is not 0, so statements name a
	// table in any letter case.
	FoldsNames bool
}

// partialJSON says why an update logged with MySQL's
// binlog_row_value_options=PARTIAL_JSON cannot be replicated, and what
// to change.
const partialJSON = "binlog_row_value_options is PARTIAL_JSON: an update of a JSON column is logged as the change to its document, not its value, and a changefeed needs the value: SET GLOBAL binlog_row_value_options='', and binlog-row-value-options='' in the server's configuration"

// minRetention is the binary log retention below which a changefeed's
// creation warns: a changefeed stopped longer than that (a weekend) finds
// its position purged.
const minRetention = 24 * 60 * 60

// Preflight checks that the server can feed a changefeed of cfg's tables
// and refuses with the server's own values and what to change: binary
// logging off, a binlog format or row image other than ROW and FULL
// (and MySQL's partial JSON updates), the
// user without the replication grants, a table missing or without a
// primary key. What works but puts the changefeed at risk (a binary log
// kept less than a day) comes back as warnings.
func Preflight(ctx context.Context, cfg Config) (Server, []string, error) {
	db, err := open(ctx, cfg)
	if err != nil {
		return Server{}, nil, err
	}
	defer db.Close()
	var srv Server
	var logBin int
	var format, image string
	if err := db.QueryRowContext(ctx, "SELECT @@version, @@server_id, @@log_bin, @@binlog_format, @@binlog_row_image").
		Scan(&srv.Version, &srv.ServerID, &logBin, &format, &image); err != nil {
		return Server{}, nil, explain(cfg, err)
	}
	srv.Flavor = "mysql"
	if strings.Contains(strings.ToLower(srv.Version), "mariadb") {
		srv.Flavor, srv.GTID = "mariadb", true
	}
	var problems []string
	if logBin == 0 {
		problems = append(problems, "binary logging is off (log_bin=OFF): start the server with log-bin, binlog-format=ROW, binlog-row-image=FULL and a server-id (docs/mysql.md)")
	}
	if !strings.EqualFold(format, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format is %s; a changefeed reads rows, so it needs ROW: SET GLOBAL binlog_format=ROW, and binlog-format=ROW in the server's configuration", format))
	}
	if !strings.EqualFold(image, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s; a changefeed needs every column of every changed row: SET GLOBAL binlog_row_image=FULL, and binlog-row-image=FULL in the server's configuration", image))
	}
	if srv.Flavor == "mysql" {
		var mode string
		if db.QueryRowContext(ctx, "SELECT @@gtid_mode").Scan(&mode) == nil {
			srv.GTID = strings.EqualFold(mode, "ON")
		}
		var executed string
		if srv.GTID && db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&executed) == nil {
			if tag := gtidTag(executed); tag != "" {
				problems = append(problems, taggedGTIDs(tag))
			}
		}
		// MySQL 8 only (MariaDB has no such variable).
		var options string
		if db.QueryRowContext(ctx, "SELECT @@binlog_row_value_options").Scan(&options) == nil && strings.Contains(strings.ToUpper(options), "PARTIAL_JSON") {
			problems = append(problems, partialJSON)
		}
	}
	if why := xaPrepared(ctx, db); why != "" {
		problems = append(problems, why)
	}
	if why := grantsMissing(ctx, db, cfg); why != "" {
		problems = append(problems, why)
	}
	if logBin != 0 {
		if why := binlogFiltered(ctx, db, cfg); why != "" {
			problems = append(problems, why)
		}
	}
	for _, t := range cfg.Tables {
		if why := tableUnfit(ctx, db, t); why != "" {
			problems = append(problems, why)
		}
	}
	if len(problems) > 0 {
		return srv, nil, fmt.Errorf("%s cannot feed this changefeed:\n  %s", cfg.Addr(), strings.Join(problems, "\n  "))
	}
	srv.RetentionSeconds = retention(ctx, db)
	var warnings []string
	if srv.RetentionSeconds > 0 && srv.RetentionSeconds < minRetention {
		warnings = append(warnings, fmt.Sprintf("the server keeps binary logs %s; a changefeed stopped longer than that cannot resume (its position purged): keep them at least a day (binlog_expire_logs_seconds=86400, or expire_logs_days=1)", seconds(srv.RetentionSeconds)))
	}
	return srv, warnings, nil
}

// open connects and checks the connection, explaining a failure.
func open(ctx context.Context, cfg Config) (*sql.DB, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, explain(cfg, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, explain(cfg, err)
	}
	return db, nil
}

// explain turns a driver error into what the operator can do about it;
// the password never appears.
func explain(cfg Config, err error) error {
	if errors.Is(err, context.Canceled) {
		// Stopped, not failed: kept as it is, so that a caller tells a
		// shutdown from an error (it names no password).
		return fmt.Errorf("%s: %w", cfg.Addr(), err)
	}
	var me *driver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045: // ER_ACCESS_DENIED_ERROR
			return fmt.Errorf("%s refused user %s: %s; check the user and password (a password not in the URI is read from MYSQL_PWD)", cfg.Addr(), cfg.User, redactIn(me.Message, cfg.Password))
		case 1049: // ER_BAD_DB_ERROR
			return fmt.Errorf("%s has no database %s: %s; name an existing database in the URI's path", cfg.Addr(), cfg.Database, me.Message)
		}
		if busy := busyError(fmt.Errorf("%s: %s", cfg.Addr(), me.Message), me.Number, me.Message); busy != nil {
			return busy
		}
		return fmt.Errorf("%s: %s", cfg.Addr(), redactIn(me.Error(), cfg.Password))
	}
	msg := redactIn(err.Error(), cfg.Password)
	if dial := model.DialFailed(err); dial || strings.Contains(msg, "no such host") {
		err := fmt.Errorf("cannot reach the MySQL server at %s: %s; check the host and port, and that the server runs and listens there", cfg.Addr(), msg)
		if dial {
			return model.Unreachable(err)
		}
		// A host name that does not resolve needs the URI fixed:
		// refused as it is, not worth a retry.
		return err
	}
	return fmt.Errorf("%s: %s", cfg.Addr(), msg)
}

func redactIn(s, password string) string {
	if password == "" {
		return s
	}
	return strings.ReplaceAll(s, password, "xxxxx")
}

// grantsMissing says which replication grants the user lacks ("" when
// it has them): REPLICATION SLAVE to read the binary log, and REPLICATION
// CLIENT (MariaDB 10.5+: BINLOG MONITOR) to read the server's position.
func grantsMissing(ctx context.Context, db *sql.DB, cfg Config) string {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return fmt.Sprintf("cannot read the grants of %s: %v", cfg.User, err)
	}
	defer rows.Close()
	var all []string
	for rows.Next() {
		var g string
		if rows.Scan(&g) == nil {
			all = append(all, strings.ToUpper(g))
		}
	}
	// The privileges granted on *.*, each whole: REPLICATION SLAVE ADMIN
	// is not REPLICATION SLAVE (a user with only it passed, and its
	// binary log dump was refused at every retry).
	granted := map[string]bool{}
	for _, g := range all {
		if i := strings.Index(g, " ON *.* "); i >= 0 && strings.HasPrefix(g, "GRANT ") {
			for _, p := range strings.Split(g[len("GRANT "):i], ",") {
				granted[strings.TrimSpace(p)] = true
			}
		}
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if granted[n] {
				return true
			}
		}
		return false
	}
	if has("ALL PRIVILEGES") {
		return ""
	}
	var missing []string
	if !has("REPLICATION SLAVE", "REPLICATION REPLICA") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !has("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER") {
		missing = append(missing, "REPLICATION CLIENT")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("user %s lacks %s: GRANT %s ON *.* TO '%s'@'%%' (and SELECT on the replicated tables)", cfg.User, strings.Join(missing, " and "), strings.Join(missing, ", "), cfg.User)
}

// binlogFiltered says which databases the changefeed reads the server
// keeps out of its binary log (binlog-do-db, binlog-ignore-db): their
// tables' changes never arrive, nor, for the URI's own database, the
// ticks and snapshot watermarks the changefeed writes there (each copy
// then waited for a watermark that never came).
func binlogFiltered(ctx context.Context, db *sql.DB, cfg Config) string {
	st, err := masterStatus(ctx, db)
	if err != nil {
		return "" // the stream says why, with the server's words
	}
	need := []string{cfg.Database}
	for _, t := range cfg.Tables {
		schema, _ := model.SplitTableName(t)
		need = append(need, schema)
	}
	var out []string
	for _, d := range need {
		if !st.logs(d) && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("the server keeps database %s out of its binary log (binlog-do-db=%q, binlog-ignore-db=%q): a changefeed reads its changes, and writes its own ticks to %s, from the binary log: remove those options from the server's configuration (they take effect at its restart), or replicate other databases",
		strings.Join(out, ", "), st.DoDB, st.IgnoreDB, cfg.Database)
}

// tableUnfit says why a table cannot be replicated ("" when it can): it
// is cdcctl's signal table, it does not exist (or the user cannot see
// it), it is a view, or it has no primary key (its rows could not be
// routed to partitions by key).
func tableUnfit(ctx context.Context, db *sql.DB, table string) string {
	if _, name := model.SplitTableName(table); name == signalTable {
		// Its rows are every changefeed's ticks and watermarks: in the
		// sink they would never match the table upstream (rules leave
		// it out too).
		return fmt.Sprintf("table %s is cdcctl's signal table (the changefeeds' ticks and watermarks), which is never replicated: leave it out", table)
	}
	kind, err := tableKind(ctx, db, table)
	if err != nil {
		return fmt.Sprintf("table %s: %v", table, err)
	}
	if kind == "" {
		return notThere(table)
	}
	if kind != "BASE TABLE" {
		return fmt.Sprintf("%s is a %s, not a table: replicate the tables it reads", table, strings.ToLower(kind))
	}
	// SHOW KEYS, not information_schema.TABLE_CONSTRAINTS: MariaDB shows a
	// user with only SELECT no constraints there.
	rows, err := db.QueryContext(ctx, "SHOW KEYS FROM "+quoteTable(table)+" WHERE Key_name = 'PRIMARY'")
	if err != nil {
		return fmt.Sprintf("table %s: %v", table, err)
	}
	keys := 0
	for rows.Next() {
		keys++
	}
	rows.Close()
	if keys == 0 {
		return noPrimaryKey(table)
	}
	return undecodedColumn(ctx, db, table)
}

// undecodedColumn says which column of table is in a character set the
// reader does not decode (charsets.go), if any: its rows would be held.
func undecodedColumn(ctx context.Context, db *sql.DB, table string) string {
	schema, name := model.SplitTableName(table)
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CHARACTER_SET_NAME IS NOT NULL ORDER BY ORDINAL_POSITION`, schema, name)
	if err != nil {
		return fmt.Sprintf("table %s: %v", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var col, set string
		if err := rows.Scan(&col, &set); err != nil {
			return fmt.Sprintf("table %s: %v", table, err)
		}
		if why := undecodable(table, col, set); why != "" {
			return why
		}
	}
	return ""
}

// Why a table cannot be replicated, as tableUnfit and unfitIn say it.
func notThere(table string) string {
	return fmt.Sprintf("table %s does not exist (or the user cannot read it: GRANT SELECT ON %s TO the user)", table, quoteTable(table))
}

func noPrimaryKey(table string) string {
	return fmt.Sprintf("table %s has no primary key: its changes cannot be routed by key; add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or leave the table out", table, quoteTable(table))
}

// undecodable says why a column in character set set cannot be read
// ("" when it can).
func undecodable(table, col, set string) string {
	if _, ok := decoders[set]; ok || asUTF8(set) || set == "latin1" {
		return ""
	}
	return fmt.Sprintf("column %s of table %s is in character set %s, which the reader does not decode: convert it (ALTER TABLE %s MODIFY %s … CHARACTER SET utf8mb4), or leave the table out", col, table, set, quoteTable(table), col)
}

// tableKind is a table's TABLE_TYPE (BASE TABLE, VIEW, ...), "" when it
// does not exist or the user cannot see it.
func tableKind(ctx context.Context, db *sql.DB, table string) (string, error) {
	schema, name := model.SplitTableName(table)
	var kind string
	err := db.QueryRowContext(ctx, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name).Scan(&kind)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return kind, err
}

// retention is how long the server keeps binary logs, in seconds (0: no
// expiry). MySQL 8 and MariaDB 10.6+ have binlog_expire_logs_seconds;
// older MariaDB only expire_logs_days.
func retention(ctx context.Context, db *sql.DB) int64 {
	var s int64
	if db.QueryRowContext(ctx, "SELECT @@binlog_expire_logs_seconds").Scan(&s) == nil && s > 0 {
		return s
	}
	var days float64
	if db.QueryRowContext(ctx, "SELECT @@expire_logs_days").Scan(&days) == nil && days > 0 {
		return int64(days * 86400)
	}
	return 0
}

func seconds(s int64) string {
	if s%3600 == 0 {
		return fmt.Sprintf("%d h", s/3600)
	}
	return fmt.Sprintf("%d s", s)
}

// quoteTable writes a table name as MySQL quotes it: `db`.`table`.
func quoteTable(table string) string {
	schema, name := model.SplitTableName(table)
	q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	if schema == "" {
		return q(name)
	}
	return q(schema) + "." + q(name)
}

// busyError is err marked worth a retry, naming the limit to raise, when
// the server's error number code says it has no connection free for the
// user now: ER_CON_COUNT_ERROR (1040, max_connections),
// ER_TOO_MANY_USER_CONNECTIONS (1203, max_user_connections) or
// ER_USER_LIMIT_REACHED (1226, the user's own limits). Every connection
// taken is not the URI's fault: an update's check answers 503, a reader
// retries. Nil for any other error.
func busyError(err error, code uint16, msg string) error {
	if code != 1040 && code != 1203 && code != 1226 {
		return nil
	}
	return model.Unreachable(fmt.Errorf("%w; try again once a connection is free, or raise %s", err, busyLimit(code, msg)))
}

// busyLimit names the limit a busy error ran into, from the server's
// words: 1226 is also an hourly limit of the user's, which a free
// connection does not lift.
func busyLimit(code uint16, msg string) string {
	switch {
	case code == 1040:
		return "max_connections"
	case code == 1203 || strings.Contains(msg, "max_user_connections"):
		return "max_user_connections (or the user's MAX_USER_CONNECTIONS)"
	}
	return "the user's hourly limits (MAX_QUERIES_PER_HOUR, MAX_UPDATES_PER_HOUR, MAX_CONNECTIONS_PER_HOUR), or wait for the next hour"
}
