package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A chunk of a bounded key range of a table just loaded (PostgreSQL has
// no statistics for it yet) is read from the key's index, in key order,
// not sorted: the planner's own choice for that query is a bitmap scan of
// the whole range and a sort, which the test checks first so that it
// shows the case is real. The chunk holds the range's first rows in key
// order.
func TestChunksAreReadFromTheKeysIndex(t *testing.T) {
	t.Parallel()
	const rows, limit = 100_000, 10_000
	_, dsn := newDB(t, fmt.Sprintf(`CREATE TABLE fresh (id int8 PRIMARY KEY, v text);
		INSERT INTO fresh SELECT g, md5(g::text) FROM generate_series(1, %d) g`, rows))
	ctx := context.Background()
	cfg, err := ParseURI(dsn + "&tables=fresh")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := snapshotConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	def, err := (&catalog{conn: conn, types: map[uint32]string{}}).tableDef(ctx, "public.fresh")
	if err != nil {
		t.Fatal(err)
	}
	span := sourcetest.IntSpans("public.fresh", rows, 4)[1] // ids 25,001 to 50,000
	q, args, _, err := rangeQuery(def, span, model.CopyProgress{}, limit)
	if err != nil {
		t.Fatal(err)
	}
	explain := func(tx pgx.Tx) string {
		t.Helper()
		rs, err := tx.Query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rs.Next() {
			var line string
			if err := rs.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(plan, "\n")
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if plain := explain(tx); !strings.Contains(plain, "Sort") {
		t.Fatalf("the planner no longer sorts a range of a table without statistics; this test shows nothing:\n%s", plain)
	}
	_ = tx.Rollback(ctx)
	var snap string
	if tx, err = chunkTx(ctx, conn, &snap); err != nil {
		t.Fatal(err)
	}
	if plan := explain(tx); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using fresh_pkey") {
		t.Fatalf("a chunk's read is not an index scan in key order:\n%s", plan)
	}
	_ = tx.Rollback(ctx)

	c, err := readRange(ctx, conn, cfg, span, model.CopyProgress{}, limit, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != limit || !c.Full {
		t.Fatalf("the chunk holds %d rows (full %v), want %d", len(c.Rows), c.Full, limit)
	}
	for i, e := range c.Rows {
		if want := fmt.Sprint(25_001 + i); e.New[0].Text != want {
			t.Fatalf("row %d of the chunk has id %s, want %s", i, e.New[0].Text, want)
		}
	}
}
