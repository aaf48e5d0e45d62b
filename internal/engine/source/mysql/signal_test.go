package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// The server's binlog_format and binlog_row_image set otherwise after a
// changefeed was created (its preflight checked them) leave the rows its
// own sessions write into the signal table (the snapshot's watermarks,
// its ticks) as they must be: a user who may set them for its session
// does, and the snapshot copies every row; one who may not is refused
// with the settings named and how to set them back. Before, the
// watermarks were logged as statements or without their columns, every
// chunk waited for them for ever, and nothing said why.
func TestTheChangefeedsOwnRowsArriveWhateverTheServersFormatNow(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE bench (id BIGINT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO bench SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000",
		"CREATE USER cdc@'%' IDENTIFIED BY 'Cdc-pass1'", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc@'%'",
		"GRANT SELECT, INSERT, DELETE ON shop.* TO cdc@'%'")
	uri := "mysql://root@" + srv.Addr() + "/shop?tables=bench&chunk-rows=500"
	// Created under ROW and FULL (the preflight), then changed.
	stored, _, err := mysql.Pin(context.Background(), uri, "limited", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	copied, pos, err := mysql.Pin(context.Background(), uri, "copied", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mysqltest.Exec(t, db, "SET GLOBAL binlog_format = 'MIXED'", "SET GLOBAL binlog_row_image = 'MINIMAL'")
	// A copy whose watermarks never arrive waits for ever: said here,
	// not at the package's timeout.
	watchdog := time.AfterFunc(2*time.Minute, func() {
		panic("the snapshot did not end within 2 minutes: its watermarks never arrived")
	})
	copyPinned(t, copied, pos, "copied", 2, 3000)
	watchdog.Stop()

	cfg, err := mysql.ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = "cdc", "Cdc-pass1"
	src, err := mysql.Open(cfg.URI(), source.Env{Changefeed: "limited"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = src.ReadChunk(ctx, model.Span{Table: "shop.bench"}, model.CopyProgress{}, source.ChunkAsk{Rows: 500},
		func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
	if err == nil || !strings.Contains(err.Error(), "binlog_format is MIXED and its binlog_row_image MINIMAL") || !strings.Contains(err.Error(), "SET GLOBAL binlog_format = ROW, binlog_row_image = FULL") {
		t.Fatalf("a chunk read by a user who may not set its session's binlog_format: %v", err)
	}
	// 'changefeed get' says it too (the source's status warnings), for
	// that user; not for one who may set them.
	limited, err := mysql.Inspect(ctx, cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(limited.Warnings, "\n"); !strings.Contains(w, "SET GLOBAL binlog_format = ROW, binlog_row_image = FULL") || !strings.Contains(w, "lag grows") {
		t.Fatalf("the status of the changefeed whose user may not set them warns: %q", limited.Warnings)
	}
	rooted, err := mysql.Inspect(ctx, copied, pos)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(rooted.Warnings, "\n"); strings.Contains(w, "binlog_row_image") {
		t.Fatalf("the status of the changefeed whose user may set them warns: %q", rooted.Warnings)
	}
}
