package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A changefeed's status says whether its reader streams the binary log
// now (the server lists it among its replicas by its server id), and an
// upstream that refuses the changefeed's credentials is said, not shown
// as a binary log of 0 bytes.
func TestTheStatusSaysWhetherTheReaderStreamsAndWhyTheServerCannotBeAsked(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY)", "CREATE USER cdc@'%' IDENTIFIED BY 'Right0ne'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc@'%'", "GRANT SELECT ON shop.* TO cdc@'%'")
	ctx := context.Background()
	raw := uri(srv, "root", "orders") + "&server-id=4242"
	if st, err := mysql.Inspect(ctx, raw, nil); err != nil || st.Active {
		t.Fatalf("the status with no reader: %+v, %v", st, err)
	}
	cfg := parse(t, raw)
	first, err := mysql.Begin(ctx, cfg, model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	pull(t, mysql.NewPuller(cfg, "cf", "mariadb", nil), first)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := mysql.Inspect(ctx, raw, first)
		if err == nil && st.Active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status while the reader streams: %+v, %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What is known without the server (where the reader resumes) comes
	// with the error.
	st, err := mysql.Inspect(ctx, uri(srv, "cdc:Wr0ngPass", "orders"), first)
	if err == nil || !strings.Contains(err.Error(), "check the user and password") || strings.Contains(err.Error(), "Wr0ngPass") || st == nil || st.Position == "" {
		t.Fatalf("the status of a server refusing the password: %+v, %v", st, err)
	}
}

// The binary log a changefeed's status says the server keeps is what
// the reader has yet to read from its position on (the position's file
// counted from its offset: counted whole, a changefeed that had read
// everything showed up to a file's size, 1 GiB by default), and once
// the position's file is purged, the status says so; the agents'
// metrics read the same through Retention.
func TestTheStatusCountsTheBinaryLogFromThePositionOn(t *testing.T) {
	t.Parallel()
	srv, dsn := mysqltest.StartWith(t, "shop", mysqlserver.Options{Binlog: true})
	exec(t, dsn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, v VARCHAR(200))")
	for i := range 50 {
		exec(t, dsn, fmt.Sprintf("INSERT INTO orders VALUES (%d, REPEAT('x', 200))", i))
	}
	ctx := context.Background()
	raw := uri(srv, "root", "orders")
	at, err := mysql.Begin(ctx, parse(t, raw), model.TsFromTime(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]func(context.Context, string, source.Position) (*source.Status, error){"Inspect": mysql.Inspect, "Retention": mysql.Retention}
	for name, read := range status {
		// At the end of the binary log: nothing to read.
		if st, err := read(ctx, raw, at); err != nil || st.RetainedBytes != 0 || st.Purged || st.Position == "" {
			t.Errorf("%s at the end of the binary log: %+v, %v", name, st, err)
		}
	}
	for i := range 20 {
		exec(t, dsn, fmt.Sprintf("INSERT INTO orders VALUES (%d, REPEAT('y', 200))", 100+i))
	}
	for name, read := range status {
		if st, err := read(ctx, raw, at); err != nil || st.RetainedBytes < 20*200 || st.RetainedBytes > 20*600 {
			t.Errorf("%s after 20 rows of 200 bytes: %+v, %v", name, st, err)
		}
	}
	mysqltest.PurgeBinaryLogs(t, mysqltest.Open(t, dsn))
	for name, read := range status {
		if st, err := read(ctx, raw, at); err != nil || !st.Purged || st.RetainedBytes != 0 {
			t.Errorf("%s after the position's file was purged: %+v, %v", name, st, err)
		}
	}
}
