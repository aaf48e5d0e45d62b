package postgres

import (
	"context"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	reads := 0
	seen := sourcetest.ChunkedSpans(t, "public.u", "uuid", []string{"", "8", "c1", ""}, func(span model.Span, copied model.CopyProgress, chunk int) {
		if chunk != 1 {
			return
		}
		// A chunk after the first: a range scan of the index.
		if plan := chunkPlan(t, conn, def, nil, span, copied, limit); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using u_pkey") || !strings.Contains(plan, "Index Cond") {
			t.Fatalf("a chunk of a uuid key is not a range scan of its index:\n%s", plan)
		}
	}, func(span model.Span, copied model.CopyProgress) *source.Chunk {
		reads++
		ask := halfGrown(reads, limit)
		c, _, err := readRange(ctx, conn, cfg, span, copied, ask, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
		if err != nil {
			t.Fatal(err)
		}
		notGrown(t, c, ask)
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

// A key of several columns with a uuid among them is copied from an
// index as well: a tenant's uuid before its rows' ids (the primary key's
// index), a tenant's uuid before text in ICU's collation (the index in
// the bytes' order the copy's warning names), and an integer before a
// uuid. The partitions are cut at bounds whose uuid values are not
// uuids ("8", "c2"), are one (a tenant's, inside its rows), or are above
// every uuid's text ("g", "zz"); each is read in chunks until done,
// every chunk after the first a range scan of the index, and every row
// is copied once, in routing order, inside its partition.
func TestAKeyWithAUUIDIsCopiedFromAnIndex(t *testing.T) {
	t.Parallel()
	const limit = 700
	_, dsn := newDB(t, `CREATE TABLE tu (tenant uuid, id int8, v text, PRIMARY KEY (tenant, id));
		INSERT INTO tu SELECT t.u, g, md5(g::text) FROM (SELECT gen_random_uuid() u FROM generate_series(1, 40)) t, generate_series(1, 300) g;
		INSERT INTO tu SELECT 'c1000000-0000-0000-0000-000000000000', g, '' FROM generate_series(-3, 3) g;
		INSERT INTO tu SELECT '9a000000-0000-0000-0000-0000000000ff', g, '' FROM generate_series(1, 300) g;
		CREATE TABLE ts (tenant uuid, sku text COLLATE "und-x-icu", v int4, PRIMARY KEY (tenant, sku));
		INSERT INTO ts SELECT t.u, CASE g % 3 WHEN 0 THEN upper(md5(g::text)) WHEN 1 THEN md5(g::text) || 'é' ELSE left(md5(g::text), 1 + g % 9) END, g
			FROM (SELECT gen_random_uuid() u FROM generate_series(1, 30) UNION ALL SELECT '7b000000-0000-0000-0000-000000000000') t, generate_series(1, 300) g ON CONFLICT DO NOTHING;
		CREATE INDEX ts_bytes ON ts (tenant, sku COLLATE "C");
		CREATE TABLE tn (n int4, u uuid, v text, PRIMARY KEY (n, u));
		INSERT INTO tn SELECT g % 20, gen_random_uuid(), '' FROM generate_series(1, 9000) g`)
	ctx := context.Background()
	for _, c := range []struct {
		table, keyTypes, index string
		bounds                 func(conn *pgx.Conn) [][]string
	}{
		{"tu", "uuid,int8", "tu_pkey", func(conn *pgx.Conn) [][]string {
			return [][]string{nil, {"8", "0"}, {"9a000000-0000-0000-0000-0000000000ff", "150"}, {"c1000000-0000-0000-0000-000000000000", "-1"}, {"c2", "5"}, {"g", "0"}, nil}
		}},
		{"ts", "uuid,text", "ts_bytes", func(conn *pgx.Conn) [][]string {
			const mid = "7b000000-0000-0000-0000-000000000000"
			var sku string
			if err := conn.QueryRow(ctx, `SELECT sku FROM ts WHERE tenant = $1 ORDER BY sku COLLATE "C" OFFSET 150 LIMIT 1`, mid).Scan(&sku); err != nil {
				t.Fatal(err)
			}
			return [][]string{nil, {"3", "a"}, {mid, sku}, {mid, sku + "0"}, {"e", "Z"}, nil}
		}},
		{"tn", "int4,uuid", "tn_pkey", func(conn *pgx.Conn) [][]string {
			var mid string
			if err := conn.QueryRow(ctx, `SELECT u::text FROM tn WHERE n = 7 ORDER BY u OFFSET 200 LIMIT 1`).Scan(&mid); err != nil {
				t.Fatal(err)
			}
			return [][]string{nil, {"3", "8"}, {"7", mid}, {"12", "zz"}, {"15", ""}, nil}
		}},
	} {
		_, conn, def := chunkReader(t, dsn, c.table)
		cat := &catalog{conn: conn, types: map[uint32]string{}}
		order, err := cat.byteOrder(ctx, "public."+c.table, def)
		if err != nil || !indexOrdered(def, order) {
			t.Fatalf("%s (key %v): not taken as ordered by an index (%v, %v)", c.table, def.KeyNames(), order, err)
		}
		copyInParts(t, dsn, c.table, c.keyTypes, c.bounds, limit, 2_500, func(plan string, chunk int, start []string, sorted string) bool {
			// A range above every uuid's text holds nothing, and is known
			// to; a partition open below reads its first chunk without a
			// bound.
			return sorted == "" && (plan == "" || !strings.Contains(plan, "Sort") && strings.Contains(plan, "Index Scan using "+c.index+" ") &&
				(chunk == 0 && start == nil || strings.Contains(plan, "Index Cond")))
		})
	}
}

// uuidBound's condition on the key's columns as they are holds for
// exactly the rows its chunk bound on their text holds for (the text
// bound stays in the query; the columns' bound is what the index reads,
// and must never leave out a row the text bound keeps): keys of a uuid
// and an integer, an integer and a uuid, and two uuids, each bound op,
// bound values that are a uuid's text, a prefix, uppercase, longer, empty
// or above every uuid's text, against rows at and around the bound.
func FuzzUUIDBound(f *testing.F) {
	for _, v := range []string{"", "8", "c1", "C1", "g", "zz", "12345678-1234-1234-1234-123456789abc", "12345678-1234-1234-1234-123456789abc0",
		"ffffffff-ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-ffffffffffff0", "a-"} {
		f.Add(v, "7", v, uint64(1), uint64(2))
	}
	f.Fuzz(func(t *testing.T, u0, n, u1 string, seed1, seed2 uint64) {
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return // an integer column's bound is an integer
		}
		num := func(s string) *big.Int { v, _ := new(big.Int).SetString(s, 10); return v }
		uuidsNear := func(v string) []string {
			out := []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
				uuidText(new(big.Int).SetUint64(seed1)), uuidText(new(big.Int).Lsh(new(big.Int).SetUint64(seed2), 64))}
			if c, ok := uuidCeil(v); ok {
				x, _ := uuidNumber(c)
				for _, d := range []int64{-1, 0, 1} {
					if y := new(big.Int).Add(x, big.NewInt(d)); y.Sign() >= 0 && y.BitLen() <= 128 {
						out = append(out, uuidText(y))
					}
				}
			}
			return out
		}
		intsNear := func(v string) []string {
			x := num(v)
			return []string{new(big.Int).Sub(x, big.NewInt(1)).String(), x.String(), new(big.Int).Add(x, big.NewInt(1)).String()}
		}
		// A column's values compare as routing orders them: an integer by
		// its value, a uuid by its text (which is its own order too).
		cmp := func(uuid bool, a, b string) int {
			if uuid {
				return strings.Compare(a, b)
			}
			return num(a).Cmp(num(b))
		}
		rowCmp := func(uuids []bool, row, vals []string) int {
			c := 0
			for i := range vals {
				if c = cmp(uuids[i], row[i], vals[i]); c != 0 {
					break
				}
			}
			return c
		}
		for _, key := range []struct {
			uuids []bool
			vals  []string
		}{{[]bool{true, false}, []string{u0, n}}, {[]bool{false, true}, []string{n, u0}}, {[]bool{true, true}, []string{u0, u1}}} {
			candidates := make([][]string, 2)
			for i, uuid := range key.uuids {
				if uuid {
					candidates[i] = uuidsNear(key.vals[i])
				} else {
					candidates[i] = intsNear(key.vals[i])
				}
			}
			for _, op := range []string{">=", ">", "<"} {
				native, cols, vals := uuidBound(source.ChunkBound{Op: op, Vals: key.vals}, key.uuids)
				for _, a := range candidates[0] {
					for _, b := range candidates[1] {
						row := []string{a, b}
						byText := holds(rowCmp(key.uuids, row, key.vals), op)
						var asThey bool
						switch native {
						case "":
							asThey = true
						case "FALSE":
						default:
							asThey = holds(rowCmp(key.uuids, row[:cols], vals[:cols]), native)
						}
						if byText != asThey {
							t.Fatalf("key %v, bound %s %q: row %q is in by its text %v, by the columns' bound (%s on %d columns, %q) %v", key.uuids, op, key.vals, row, byText, native, cols, vals, asThey)
						}
					}
				}
			}
		}
	})
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
	benchIndexAgainstTextOrder(b, dsn, "u", "uuid", rows, func(def *source.TableDef) chunkQuery {
		return func(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
			return rangeQuery(quoteQualified(span.Table), def, nil, false, span, copied, limit)
		}
	})
}

// BenchmarkTenantKeyChunks is BenchmarkUUIDKeyChunks for a key of two
// columns, a tenant's uuid before its rows' ids: 200 tenants of 1,000
// rows.
//
//	go test -run '^$' -bench 'TenantKeyChunks' -benchtime 3x ./internal/engine/source/postgres
func BenchmarkTenantKeyChunks(b *testing.B) {
	const rows = 200_000
	_, dsn := newDB(b, fmt.Sprintf(`CREATE TABLE tb (tenant uuid, id int8, v text, PRIMARY KEY (tenant, id));
		INSERT INTO tb SELECT t.u, g, md5(g::text) FROM (SELECT gen_random_uuid() u FROM generate_series(1, %d)) t, generate_series(1, 1000) g; ANALYZE tb`, rows/1000))
	benchIndexAgainstTextOrder(b, dsn, "tb", "uuid,int8", rows, func(def *source.TableDef) chunkQuery {
		return func(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
			return rangeQuery(quoteQualified(span.Table), def, nil, false, span, copied, limit)
		}
	})
}

// uuidBound is nativeBound for a key of uuids (marked) and integers.
func uuidBound(b source.ChunkBound, uuids []bool) (op string, n int, vals []string) {
	cuts := make([]func(string) cut, len(uuids))
	for i, u := range uuids {
		cuts[i] = exactCut
		if u {
			cuts[i] = uuidCut
		}
	}
	return nativeBound(b, cuts)
}
