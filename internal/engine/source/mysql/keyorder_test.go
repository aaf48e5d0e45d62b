package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A table keyed by bytes (a uuid in BINARY(16)) is copied from its
// primary key's index: each chunk is a range read, never a sort of the
// rest of the table. Three partitions cut at bounds inside the keys'
// bytes, each read in chunks until done, copy every row once, in byte
// order, inside their own ranges.
func TestABinaryKeyedTableIsCopiedFromItsIndex(t *testing.T) {
	t.Parallel()
	const rows, limit = 20_000, 3_000
	ctx := context.Background()
	conn := keysConn(t,
		`CREATE TABLE u (id BINARY(16) PRIMARY KEY, v VARCHAR(40))`,
		fmt.Sprintf(`INSERT INTO u SELECT UNHEX(MD5(seq)), MD5(seq) FROM seq_1_to_%d`, rows),
		`ANALYZE TABLE u`)
	def, _, err := tableDef(ctx, conn, "keys.u")
	if err != nil {
		t.Fatal(err)
	}
	seen := sourcetest.ChunkedSpans(t, "keys.u", keyTypes(def), []string{"", "\x80", "\xc1\x07", ""}, func(span model.Span, copied model.CopyProgress, chunk int) {
		if chunk != 1 {
			return
		}
		// A chunk after the first: a range read of the index.
		q, err := rangeQuery(def, span, copied, limit)
		if err != nil {
			t.Fatal(err)
		}
		explainRange(t, conn, q, "a chunk of a binary key")
	}, func(span model.Span, copied model.CopyProgress) *source.Chunk {
		q, err := rangeQuery(def, span, copied, limit)
		if err != nil {
			t.Fatal(err)
		}
		c := source.NewChunk(span.Table, def, limit)
		if err := readChunk(ctx, conn, c, q, source.ChunkAsk{Rows: limit}, nil, nil); err != nil {
			t.Fatal(err)
		}
		return c
	})
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %x copied %d times", id, n)
		}
	}
	if len(seen) != rows {
		t.Fatalf("copied %d rows of %d", len(seen), rows)
	}
}

// explainRange fails the test unless q reads a range of the primary key,
// without sorting (MariaDB's EXPLAIN, of ten columns); what names it.
func explainRange(t testing.TB, conn *sql.Conn, q, what string) {
	t.Helper()
	var id int
	var selectType, table, typ, possible, key, keyLen, ref, extra sql.NullString
	var n sql.NullInt64
	if err := conn.QueryRowContext(context.Background(), "EXPLAIN "+q).Scan(&id, &selectType, &table, &typ, &possible, &key, &keyLen, &ref, &n, &extra); err != nil {
		t.Fatalf("EXPLAIN %s: %v", q, err)
	}
	if typ.String != "range" || key.String != "PRIMARY" || strings.Contains(extra.String, "filesort") {
		t.Fatalf("%s is not a range read of its index: type %q, key %q, extra %q\n%s", what, typ.String, key.String, extra.String, q)
	}
}

// keysConn starts MariaDB with a database keys, runs stmts in it, and
// returns a connection to it.
func keysConn(tb testing.TB, stmts ...string) *sql.Conn {
	tb.Helper()
	_, dsn := mysqltest.Start(tb, "keys")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			tb.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	// In UTC, as the source's own connections are (config.go).
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
		tb.Fatal(err)
	}
	return conn
}
