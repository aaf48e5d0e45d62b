package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// exec runs statements as root on a server's database.
func exec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// uri is a mysql:// URI for user on srv's database shop.
func uri(srv *mysqlserver.Server, user, tables string) string {
	return "mysql://" + user + "@" + srv.Addr() + "/shop?tables=" + tables
}

func parse(t *testing.T, raw string) mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseURI(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A server set up for change data capture (binary log in row format with
// full images, a user with the replication grants, tables with primary
// keys) passes; a binary log kept an hour passes with a warning naming
// the setting.
func TestPreflightPassesAServerSetUpForChangeDataCapture(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: []string{"--binlog-expire-logs-seconds=3600"}})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(20))",
		"CREATE USER cdc@'%' IDENTIFIED BY 's3cret'", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc@'%'", "GRANT SELECT ON shop.* TO cdc@'%'")
	got, warnings, err := mysql.Preflight(context.Background(), parse(t, "mysql://cdc:s3cret@"+srv.Addr()+"/shop?tables=orders"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Flavor != "mariadb" || !got.GTID || got.ServerID != 1 || got.RetentionSeconds != 3600 {
		t.Fatalf("the server read as %+v", got)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "keeps binary logs 1 h") || !strings.Contains(warnings[0], "binlog_expire_logs_seconds=86400") {
		t.Fatalf("warnings: %q", warnings)
	}
}

// What a server lacks is refused in the server's own values, each with
// the setting or grant to change; a wrong password and an unreachable
// server say so, and the password appears nowhere.
func TestPreflightRefusesWithTheServersValuesAndTheFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	statement, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true, Args: []string{"--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL", "--binlog-ignore-db=shop"}})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY)", "CREATE TABLE notes (body TEXT)", "CREATE VIEW recent AS SELECT id FROM orders",
		"CREATE TABLE cdcctl_signal (changefeed VARCHAR(64) PRIMARY KEY)",
		"CREATE TABLE nordic (id INT PRIMARY KEY, name VARCHAR(10) CHARACTER SET swe7, memo VARCHAR(10) CHARACTER SET cp1251)",
		"CREATE USER reader@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON shop.* TO reader@'%'",
		"CREATE USER admin@'%' IDENTIFIED BY 'pw'", "GRANT REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO admin@'%'", "GRANT SELECT ON shop.* TO admin@'%'")
	_, _, err := mysql.Preflight(ctx, parse(t, uri(statement, "reader:pw", "orders,notes,recent,missing,nordic,cdcctl_signal")))
	if err == nil {
		t.Fatal("a server in statement format accepted")
	}
	for _, want := range []string{
		"binlog_format is STATEMENT; a changefeed reads rows, so it needs ROW: SET GLOBAL binlog_format=ROW",
		"binlog_row_image is MINIMAL; a changefeed needs every column of every changed row: SET GLOBAL binlog_row_image=FULL",
		"user reader lacks REPLICATION SLAVE and REPLICATION CLIENT: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'reader'@'%'",
		"table shop.notes has no primary key",
		"shop.recent is a view, not a table",
		"table shop.cdcctl_signal is cdcctl's signal table (the changefeeds' ticks and watermarks), which is never replicated: leave it out",
		"table shop.missing does not exist",
		"column name of table shop.nordic is in character set swe7, which the reader does not decode: convert it (ALTER TABLE `shop`.`nordic` MODIFY name … CHARACTER SET utf8mb4), or leave the table out",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}

	// A database kept out of the binary log (binlog-ignore-db): its
	// changes, and the ticks the changefeed writes there, never arrive.
	_, _, err = mysql.Preflight(ctx, parse(t, uri(statement, "root", "orders")))
	if err == nil || !strings.Contains(err.Error(), `the server keeps database shop out of its binary log (binlog-do-db="", binlog-ignore-db="shop")`) {
		t.Fatalf("a database the binary log leaves out: %v", err)
	}
	// REPLICATION SLAVE ADMIN is not REPLICATION SLAVE: its dump was
	// refused at every retry.
	_, _, err = mysql.Preflight(ctx, parse(t, uri(statement, "admin:pw", "orders")))
	if err == nil || !strings.Contains(err.Error(), "user admin lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.*") {
		t.Fatalf("a user with REPLICATION SLAVE ADMIN only: %v", err)
	}

	nobin, _ := mysqltest.Start(t, "shop")
	_, _, err = mysql.Preflight(ctx, parse(t, uri(nobin, "root", "orders")))
	if err == nil || !strings.Contains(err.Error(), "binary logging is off (log_bin=OFF): start the server with log-bin, binlog-format=ROW") {
		t.Fatalf("a server without a binary log: %v", err)
	}

	_, _, err = mysql.Preflight(ctx, parse(t, uri(statement, "reader:wrong-pass", "orders")))
	if err == nil || !strings.Contains(err.Error(), "refused user reader") || !strings.Contains(err.Error(), "check the user and password") || strings.Contains(err.Error(), "wrong-pass") {
		t.Fatalf("a wrong password: %v", err)
	}
	_, _, err = mysql.Preflight(ctx, parse(t, "mysql://root@127.0.0.1:1/shop?tables=orders"))
	if err == nil || !strings.Contains(err.Error(), "cannot reach the MySQL server at 127.0.0.1:1") || !errors.Is(err, model.ErrUnreachable) {
		t.Fatalf("an unreachable server (worth a retry as it is): %v", err)
	}
	// A wrong password is refused as it is: no retry mends it.
	if _, _, err = mysql.Preflight(ctx, parse(t, uri(statement, "reader:wrong-pass", "orders"))); errors.Is(err, model.ErrUnreachable) {
		t.Fatalf("a wrong password marked worth a retry: %v", err)
	}
}

// A server or user with no connection free (max_connections, the user's
// MAX_USER_CONNECTIONS) is worth trying again, not a wrong URI: an
// update's check of a new connection answers 503 (nothing changed), and
// the message names the limit to raise.
func TestAUserWithNoConnectionFreeIsWorthTryingAgain(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY)",
		"CREATE USER cdc@'%' IDENTIFIED BY 's3cret' WITH MAX_USER_CONNECTIONS 1", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc@'%'", "GRANT SELECT ON shop.* TO cdc@'%'")
	held, err := sql.Open("mysql", "cdc:s3cret@tcp("+srv.Addr()+")/shop")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	conn, err := held.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _, err = mysql.Preflight(context.Background(), parse(t, uri(srv, "cdc:s3cret", "orders")))
	if !errors.Is(err, model.ErrUnreachable) || !strings.Contains(err.Error(), "max_user_connections") || !strings.Contains(err.Error(), "try again once a connection is free") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a user at its connection limit: %v; want it worth a retry, naming the limit", err)
	}
}
