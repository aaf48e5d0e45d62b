package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
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
	_, dsn := mysqltest.Start(t, "keys")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE TABLE u (id BINARY(16) PRIMARY KEY, v VARCHAR(40))`,
		fmt.Sprintf(`INSERT INTO u SELECT UNHEX(MD5(seq)), MD5(seq) FROM seq_1_to_%d`, rows),
		`ANALYZE TABLE u`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	def, _, err := tableDef(ctx, conn, "keys.u")
	if err != nil {
		t.Fatal(err)
	}
	types := keyTypes(def)
	enc := func(v string) string {
		if v == "" {
			return ""
		}
		k, err := model.EncodeKeyValues(types, []string{v})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	bounds := []string{"", "\x80", "\xc1\x07", ""}
	seen := map[string]int{}
	for i := 0; i+1 < len(bounds); i++ {
		span := model.Span{Table: "keys.u", Key: types, Start: enc(bounds[i]), End: enc(bounds[i+1])}
		var copied model.CopyProgress
		prev := ""
		for chunk := 0; ; chunk++ {
			q, err := rangeQuery(def, span, copied, limit)
			if err != nil {
				t.Fatal(err)
			}
			if chunk == 1 {
				// A chunk after the first: a range read of the index.
				var id int
				var selectType, table, typ, possible, key, keyLen, ref, extra sql.NullString
				var n sql.NullInt64
				if err := conn.QueryRowContext(ctx, "EXPLAIN "+q).Scan(&id, &selectType, &table, &typ, &possible, &key, &keyLen, &ref, &n, &extra); err != nil {
					t.Fatalf("EXPLAIN %s: %v", q, err) // MariaDB's ten columns
				}
				if typ.String != "range" || key.String != "PRIMARY" || strings.Contains(extra.String, "filesort") {
					t.Fatalf("a chunk of a binary key is not a range read of its index: type %q, key %q, extra %q\n%s", typ.String, key.String, extra.String, q)
				}
			}
			c := source.NewChunk(span.Table, def, limit)
			if err := readChunk(ctx, conn, c, q); err != nil {
				t.Fatal(err)
			}
			for _, e := range c.Rows {
				id := e.New[0].Text
				if id <= prev || id < bounds[i] || (bounds[i+1] != "" && id >= bounds[i+1]) {
					t.Fatalf("partition [%x, %x) read %x after %x", bounds[i], bounds[i+1], id, prev)
				}
				prev = id
				seen[id]++
			}
			if len(c.Rows) < limit {
				break
			}
			copied = copied.CopiedThrough(c.Last)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %x copied %d times", id, n)
		}
	}
	if len(seen) != rows {
		t.Fatalf("copied %d rows of %d", len(seen), rows)
	}
}
