package postgres

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
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
// order. A chunk of a table keyed by text in a collation that is not the
// bytes' order (ICU's root here; its index does not give the bytes'
// order) is sorted, and not compiled by the JIT.
func TestChunksAreReadFromTheKeysIndex(t *testing.T) {
	t.Parallel()
	const rows, limit = 100_000, 10_000
	_, dsn := newDB(t, fmt.Sprintf(`CREATE TABLE fresh (id int8 PRIMARY KEY, v text);
		INSERT INTO fresh SELECT g, md5(g::text) FROM generate_series(1, %d) g;
		CREATE TABLE items (sku text COLLATE "und-x-icu", line int4, qty int4, PRIMARY KEY (sku, line));
		INSERT INTO items SELECT 'sku-' || (g %% 50), g, g %% 9 FROM generate_series(1, 6000) g`, rows))
	ctx := context.Background()
	cfg, conn, def := chunkReader(t, dsn, "fresh")
	span := sourcetest.IntSpans("public.fresh", rows, 4)[1] // ids 25,001 to 50,000
	q, args, _, err := rangeQuery(quoteQualified(span.Table), def, nil, false, span, model.CopyProgress{}, limit)
	if err != nil {
		t.Fatal(err)
	}
	explain := func(tx pgx.Tx) string {
		t.Helper()
		return explainIn(t, tx, "EXPLAIN "+q, args...)
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
	if tx, err = chunkTx(ctx, conn, &snap, orderOf(def, nil, false)); err != nil {
		t.Fatal(err)
	}
	if plan := explain(tx); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using fresh_pkey") {
		t.Fatalf("a chunk's read is not an index scan in key order:\n%s", plan)
	}
	_ = tx.Rollback(ctx)

	c, _, err := readRange(ctx, conn, cfg, span, model.CopyProgress{}, source.ChunkAsk{Rows: limit}, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
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

	// A key of text is ordered by its bytes, which its index in ICU's
	// collation does not give: its chunks are sorted, as the planner
	// chooses, and never compiled by the JIT (a chunk of 40 rows took
	// 185 ms of it when sorts were disabled for every key).
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	itemsDef, err := cat.tableDef(ctx, "public.items")
	if err != nil {
		t.Fatal(err)
	}
	bytewise, err := cat.byteOrder(ctx, "public.items", itemsDef)
	if err != nil || len(bytewise) != 0 {
		t.Fatalf("sku in ICU's collation taken as ordered by its bytes: %v (%v)", bytewise, err)
	}
	from, _ := model.EncodeKeyValues("text,int4", []string{"sku-2", "3002"})
	q, args, _, err = rangeQuery(quoteQualified("public.items"), itemsDef, bytewise, false, model.Span{Table: "public.items", Key: "text,int4", Start: from}, model.CopyProgress{}, 40)
	if err != nil {
		t.Fatal(err)
	}
	if tx, err = chunkTx(ctx, conn, &snap, orderOf(itemsDef, bytewise, false)); err != nil {
		t.Fatal(err)
	}
	if plan := explainIn(t, tx, "EXPLAIN ANALYZE "+q, args...); !strings.Contains(plan, "Sort") || strings.Contains(plan, "JIT") {
		t.Fatalf("a chunk of a table keyed by text is not sorted without the JIT:\n%s", plan)
	}
	_ = tx.Rollback(ctx)

	// The index the copy's warning names for it (sortedWhy) serves the
	// key of text and integer: its chunks are read from that index.
	_, stmt, _ := strings.Cut(sortedWhy("public.items", itemsDef, true), "from the next chunk on: ")
	if want := `CREATE INDEX CONCURRENTLY ON "public"."items" ("sku" COLLATE "C", "line")`; stmt != want {
		t.Fatalf("the warning names %q, want %q", stmt, want)
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	if bytewise, err = cat.byteOrder(ctx, "public.items", itemsDef); err != nil || !indexOrdered(itemsDef, bytewise) {
		t.Fatalf("items with an index in the bytes' order: %v (%v)", bytewise, err)
	}
	q, args, _, err = rangeQuery(quoteQualified("public.items"), itemsDef, bytewise, false, model.Span{Table: "public.items", Key: "text,int4", Start: from}, model.CopyProgress{}, 40)
	if err != nil {
		t.Fatal(err)
	}
	if tx, err = chunkTx(ctx, conn, &snap, orderOf(itemsDef, bytewise, false)); err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if plan := explainIn(t, tx, "EXPLAIN "+q, args...); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using items_sku_line_idx") {
		t.Fatalf("a chunk of items is not read from the index in the bytes' order:\n%s", plan)
	}
	res, err := tx.Query(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(res, func(r pgx.CollectableRow) (string, error) {
		var sku string
		var line, qty int32
		err := r.Scan(&sku, &line, &qty)
		return fmt.Sprintf("%s/%d", sku, line), err
	})
	if err != nil || len(got) != 40 {
		t.Fatalf("the chunk read %d rows (%v)", len(got), err)
	}
	// From the span's start, sku-2's line 3002, its lines in order.
	for i, g := range got {
		if want := fmt.Sprintf("sku-2/%d", 3002+50*i); g != want {
			t.Fatalf("row %d of the chunk is %s, want %s (all: %v)", i, g, want, got)
		}
	}
}

// chunkReader is what reading table's chunks takes: the source's
// configuration, a snapshot connection (closed at the test's end) and the
// table's definition.
func chunkReader(t testing.TB, dsn, table string) (Config, *pgx.Conn, *source.TableDef) {
	t.Helper()
	ctx := context.Background()
	cfg, err := ParseURI(dsn + "&tables=" + table)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := snapshotConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	def, err := (&catalog{conn: conn, types: map[uint32]string{}}).tableDef(ctx, "public."+table)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, conn, def
}

// chunkPlan is the plan of a span's next chunk after copied, as
// readRange reads it (its query, in a chunk's transaction).
func chunkPlan(t *testing.T, conn *pgx.Conn, def *source.TableDef, order byteOrder, span model.Span, copied model.CopyProgress, limit int) string {
	t.Helper()
	ctx := context.Background()
	q, args, _, err := rangeQuery(quoteQualified(span.Table), def, order, false, span, copied, limit)
	if err != nil {
		t.Fatal(err)
	}
	var snap string
	how := orderOf(def, order, false)
	tx, err := chunkTx(ctx, conn, &snap, how)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if timeLed(def) {
		if q, args, _, _, err = timeLedQuery(ctx, tx, quoteQualified(span.Table), def, order, span, copied, limit, q, args, how); err != nil {
			t.Fatal(err)
		}
	}
	return explainIn(t, tx, "EXPLAIN "+q, args...)
}

// explainIn returns the plan an EXPLAIN statement prints.
func explainIn(t *testing.T, tx pgx.Tx, stmt string, args ...any) string {
	t.Helper()
	rs, err := tx.Query(context.Background(), stmt, args...)
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

// indexOrdered says a chunk of the table is read in its key index's
// order, every column of it (time columns aside, which a chunk checks in
// its snapshot).
func indexOrdered(def *source.TableDef, order byteOrder) bool {
	return orderOf(def, order, false) == indexOrder
}

// writeUntil runs step on a connection of its own, with a random source
// of seed, again and again until the returned stop is called (which waits
// for it); an error of step fails the test and ends the writes.
func writeUntil(t *testing.T, dsn string, seed int64, step func(conn *pgx.Conn, rng *rand.Rand) error) (stop func()) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		rng := rand.New(rand.NewSource(seed))
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := step(conn, rng); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// holds says a comparison's result c (negative, zero, positive) meets op
// (">=", ">", "<=", "<").
func holds(c int, op string) bool {
	switch op {
	case ">=":
		return c >= 0
	case ">":
		return c > 0
	case "<=":
		return c <= 0
	}
	return c < 0
}

// chunkTx begins a chunk's read: one REPEATABLE READ snapshot for the
// rows and for what it saw (visible.go), its txid snapshot into snap, and
// the planner's settings for reading in order how (setOrder): a chunk's
// read as beginChunk begins it, without its low watermark, for the
// tests that look at its queries' plans.
func chunkTx(ctx context.Context, conn *pgx.Conn, snap *string, how readOrder) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	var settings string
	if err := tx.QueryRow(ctx, snapshotQuery(how)).Scan(snap, &settings); err != nil {
		_ = tx.Rollback(context.Background())
		return nil, err
	}
	return tx, nil
}
