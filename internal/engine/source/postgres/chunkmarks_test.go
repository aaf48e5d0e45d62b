package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A chunk's read begins and ends with its watermarks, each written in a
// round trip with the read's own statements: the low one committed in a
// transaction of its own before the read's snapshot, the high one after,
// with that snapshot, both in the WAL in that order and whole (a table
// name with a quote in it). A watermark that cannot be written fails the
// chunk saying which, and leaves its connection usable.
func TestAChunkIsReadBetweenItsWatermarks(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE "it's" (id int8 PRIMARY KEY, v text);
		INSERT INTO "it's" SELECT g, md5(g::text) FROM generate_series(1, 300) g`)
	// Slots are the server's, not the database's: named after the test.
	psql(t, srv, dsn, `SELECT pg_create_logical_replication_slot('chunkmarks', 'test_decoding')`)
	ctx := context.Background()
	cfg, conn, _ := chunkReader(t, dsn, `"it's"`)
	span := model.Span{Table: "public.it's", Key: "int8"}
	yes, noop := func(*source.Chunk) bool { return true }, func(*source.Chunk) {}
	c, _, err := readRange(ctx, conn, cfg, span, model.CopyProgress{}, source.ChunkAsk{Rows: 100, Most: 1000}, yes, noop)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 300 || c.Snap == "" {
		t.Fatalf("the chunk read %d rows under snapshot %q, want all 300 under one", len(c.Rows), c.Snap)
	}
	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_get_changes('chunkmarks', NULL, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	var wal []string
	for rows.Next() {
		wal = append(wal, string(rows.RawValues()[0]))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// test_decoding: BEGIN xid, the message, COMMIT xid for each watermark.
	var marks []source.Mark
	var xids []uint64
	for i, line := range wal {
		_, content, ok := strings.Cut(line, "content:")
		if !strings.HasPrefix(line, "message: transactional: 1 prefix: "+markPrefix) || !ok {
			continue
		}
		if i == 0 || !strings.HasPrefix(wal[i-1], "BEGIN") || i+1 == len(wal) || !strings.HasPrefix(wal[i+1], "COMMIT") {
			t.Fatalf("a watermark is not in a transaction of its own: %q", wal)
		}
		var mk source.Mark
		if err := json.Unmarshal([]byte(content), &mk); err != nil {
			t.Fatalf("watermark %q: %v", content, err)
		}
		marks = append(marks, mk)
		xid, err := strconv.ParseUint(strings.TrimPrefix(wal[i-1], "BEGIN "), 10, 64)
		if err != nil {
			t.Fatalf("a watermark's transaction %q: %v", wal[i-1], err)
		}
		xids = append(xids, xid)
	}
	want := []source.Mark{{Kind: "low", ID: c.ID, Table: span.Table}, {Kind: "high", ID: c.ID, Table: span.Table, Snap: c.Snap}}
	if len(marks) != 2 || marks[0].Kind != want[0].Kind || marks[0].ID != c.ID || marks[0].Table != span.Table || marks[0].Snap != "" ||
		marks[1].Kind != want[1].Kind || marks[1].ID != c.ID || marks[1].Table != span.Table || marks[1].Snap != c.Snap {
		t.Fatalf("the WAL holds watermarks %+v, want %+v", marks, want)
	}
	// The read's snapshot (xmin:xmax:running) sees the low watermark's
	// transaction, committed before it, and not the high one's, after.
	visible := func(xid uint64) bool {
		parts := strings.Split(c.Snap, ":")
		if len(parts) != 3 {
			t.Fatalf("snapshot %q", c.Snap)
		}
		xmax, _ := strconv.ParseUint(parts[1], 10, 64)
		return xid < xmax && !slices.Contains(strings.Split(parts[2], ","), strconv.FormatUint(xid, 10))
	}
	if !visible(xids[0]) || visible(xids[1]) {
		t.Fatalf("the read's snapshot %s: sees the low watermark's transaction %d: %v, the high one's %d: %v; want it to see the first only", c.Snap, xids[0], visible(xids[0]), xids[1], visible(xids[1]))
	}

	// A watermark the server refuses (here a function of the same name
	// that raises, found first on the session's search path), low or
	// high: the chunk says which failed, and its connection reads the
	// next chunk once it may.
	for _, kind := range []string{"low", "high"} {
		psql(t, srv, dsn, `CREATE OR REPLACE FUNCTION public.pg_logical_emit_message(bool, text, text) RETURNS pg_lsn LANGUAGE plpgsql AS $$
			BEGIN IF $3 LIKE '%"`+kind+`"%' THEN RAISE EXCEPTION 'no such watermarks here'; END IF; RETURN pg_catalog.pg_logical_emit_message($1, $2, $3); END $$`)
		if _, err := conn.Exec(ctx, `SET search_path = public, pg_catalog`); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readRange(ctx, conn, cfg, span, model.CopyProgress{}, source.ChunkAsk{Rows: 100}, yes, noop); err == nil || !strings.Contains(err.Error(), "write the "+kind+" watermark") {
			t.Fatalf("a chunk whose %s watermark cannot be written: %v, want an error that says so", kind, err)
		}
		if _, err := conn.Exec(ctx, `RESET search_path`); err != nil {
			t.Fatalf("the connection after a failed chunk: %v", err)
		}
		if c, _, err = readRange(ctx, conn, cfg, span, model.CopyProgress{}, source.ChunkAsk{Rows: 100}, yes, noop); err != nil || len(c.Rows) != 100 {
			t.Fatalf("the next chunk on the same connection after a refused %s watermark: %v (%d rows)", kind, err, len(c.Rows))
		}
	}
}
