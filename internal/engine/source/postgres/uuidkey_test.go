package postgres

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table keyed by a uuid is copied from its key's index: each chunk is a
// range scan in the uuid's order, which is its text's, never a sort of the
// rest of the table. Three partitions cut at bounds that are not uuids
// ("8", "c1"), each read in chunks until done, copy every row once, each
// in the order of its text, inside its own range.
func TestAUUIDKeyedTableIsCopiedFromItsIndex(t *testing.T) {
	t.Parallel()
	const rows, limit = 20_000, 3_000
	_, dsn := newDB(t, fmt.Sprintf(`CREATE TABLE u (id uuid PRIMARY KEY, v text);
		INSERT INTO u SELECT gen_random_uuid(), md5(g::text) FROM generate_series(1, %d) g`, rows))
	ctx := context.Background()
	cfg, conn, def := chunkReader(t, dsn, "u")
	if !uuidKey(def) || !indexOrdered(def, nil) {
		t.Fatalf("table u (key %v, columns %+v) is not taken as keyed by a uuid", def.KeyNames(), def.Columns)
	}
	seen := sourcetest.ChunkedSpans(t, "public.u", "uuid", []string{"", "8", "c1", ""}, limit, func(span model.Span, copied model.CopyProgress, chunk int) {
		if chunk != 1 {
			return
		}
		// A chunk after the first: a range scan of the index.
		q, args, _, err := rangeQuery(def, nil, span, copied, limit)
		if err != nil {
			t.Fatal(err)
		}
		var snap string
		tx, err := chunkTx(ctx, conn, &snap, indexOrdered(def, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // read only
		if plan := explainIn(t, tx, "EXPLAIN "+q, args...); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using u_pkey") || !strings.Contains(plan, "Index Cond") {
			t.Fatalf("a chunk of a uuid key is not a range scan of its index:\n%s", plan)
		}
	}, func(span model.Span, copied model.CopyProgress) *source.Chunk {
		c, _, err := readRange(ctx, conn, cfg, span, copied, limit, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	var upstream int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM u`).Scan(&upstream); err != nil {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %s copied %d times", id, n)
		}
	}
	if len(seen) != upstream || upstream != rows {
		t.Fatalf("copied %d rows of %d (%d upstream)", len(seen), rows, upstream)
	}
}

// uuidCeil is the least uuid text at or above any text: checked against
// the uuid just below it, which must be below the text.
func FuzzUUIDCeil(f *testing.F) {
	for _, v := range []string{"", "8", "m", "c1", "a-", "0000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-ffffffffffff0",
		"12345678-1234-1234-1234-123456789abc", "12345678-1234-1234-1234-123456789abg", "12345678_", "fffffffg", "\xff"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		u, ok := uuidCeil(v)
		const top = "ffffffff-ffff-ffff-ffff-ffffffffffff"
		if !ok {
			if top >= v {
				t.Fatalf("no ceiling for %q, but %s is at or above it", v, top)
			}
			return
		}
		n, valid := uuidNumber(u)
		if !valid {
			t.Fatalf("ceiling of %q: %q is not a uuid's text", v, u)
		}
		if u < v {
			t.Fatalf("ceiling of %q: %q is below it", v, u)
		}
		if n.Sign() > 0 {
			if below := uuidText(new(big.Int).Sub(n, big.NewInt(1))); below >= v {
				t.Fatalf("ceiling of %q: %q, but %q below it is at or above it too", v, u, below)
			}
		}
	})
}

func TestUUIDCeil(t *testing.T) {
	for v, want := range map[string]string{
		"":                                      "00000000-0000-0000-0000-000000000000",
		"8":                                     "80000000-0000-0000-0000-000000000000",
		"c1":                                    "c1000000-0000-0000-0000-000000000000",
		"a-":                                    "a0000000-0000-0000-0000-000000000000",
		"12345678-1234-1234-1234-123456789abc":  "12345678-1234-1234-1234-123456789abc",
		"12345678-1234-1234-1234-123456789abc0": "12345678-1234-1234-1234-123456789abd",
		"1234567g":                              "12345680-0000-0000-0000-000000000000",
		"m":                                     "",
	} {
		if got, _ := uuidCeil(v); got != want {
			t.Errorf("uuidCeil(%q) = %q, want %q", v, got, want)
		}
	}
}

// uuidNumber reads a uuid's canonical text as its 128-bit number.
func uuidNumber(u string) (*big.Int, bool) {
	if len(u) != 36 {
		return nil, false
	}
	for i := range len(u) {
		if !allowed(i, u[i]) {
			return nil, false
		}
	}
	return new(big.Int).SetString(strings.ReplaceAll(u, "-", ""), 16)
}

// uuidText is the canonical text of a 128-bit number.
func uuidText(n *big.Int) string {
	h := fmt.Sprintf("%032x", n)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// BenchmarkUUIDKeyChunks reads a table of 200,000 rows keyed by a uuid in
// chunks of 4,096 (the default), one partition from start to end, with
// the index's range scans (uuidRangeQuery) against the queries in the
// key's text order every other key is read with (textOrderQuery), in
// the same run, in turn: the query's time alone (rows read, not built).
//
//	go test -run '^$' -bench UUIDKeyChunks -benchtime 3x ./internal/engine/source/postgres
func BenchmarkUUIDKeyChunks(b *testing.B) {
	const rows = 200_000
	_, dsn := newDB(b, fmt.Sprintf(`CREATE TABLE u (id uuid PRIMARY KEY, v text);
		INSERT INTO u SELECT gen_random_uuid(), md5(g::text) FROM generate_series(1, %d) g; ANALYZE u`, rows))
	benchIndexAgainstTextOrder(b, dsn, "u", "uuid", rows, func(def *source.TableDef) chunkQuery { return uuidRangeQuery })
}
