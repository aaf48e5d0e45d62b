package postgres

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table keyed by text in a collation that orders it by its bytes (the
// database's default, C here, or a column's own "C") is copied from its
// key's index: each chunk after the first is a range scan, not a sort of
// the rest of its partition. Keyed by text in ICU's root collation, whose
// order is not the bytes', it is sorted, and the copy says so with the
// index that would serve it; once that index is made (the statement
// the warning names), the same table is read from it. Either way four
// partitions cut at bounds that are no key ("8", "C1", "c1"), each read
// in chunks until done, copy every row once, in the order of its bytes,
// inside their ranges: keys of mixed case, of several lengths and
// prefixes of one another, with spaces, accents, CJK and emoji.
func TestATextKeyedTableIsCopiedFromItsIndex(t *testing.T) {
	t.Parallel()
	const rows, limit = 12_000, 2_000
	keys := func(table, col string) string {
		return fmt.Sprintf(`CREATE TABLE %[1]s (id %[2]s PRIMARY KEY, v int4);
		INSERT INTO %[1]s SELECT CASE g %% 5 WHEN 0 THEN upper(md5(g::text)) WHEN 1 THEN md5(g::text) || 'é' WHEN 2 THEN left(md5(g::text), 3 + g %% 7) || ' 日本'
			WHEN 3 THEN md5(g::text) || '😀' ELSE left(md5(g::text), 1 + g %% 12) || g::text END, g FROM generate_series(1, %[3]d) g ON CONFLICT DO NOTHING;
		INSERT INTO %[1]s VALUES ('a'), ('a '), ('ab'), ('B'), ('é'), ('😀'), ('8'), ('C1'), ('c1') ON CONFLICT DO NOTHING;`, table, col, rows)
	}
	_, dsn := newDB(t, keys("tk", "text")+keys("tv", `varchar(60) COLLATE "C"`)+keys("ti", `text COLLATE "und-x-icu"`))
	ctx := context.Background()
	var advice string // the sorted table's warning
	for _, c := range []struct {
		table, index string
		bytewise     bool
	}{{"tk", "tk_pkey", true}, {"tv", "tv_pkey", true}, {"ti", "", false}, {"ti", "ti_id_idx", true}} {
		cfg, conn, def := chunkReader(t, dsn, c.table)
		if c.index == "ti_id_idx" {
			// The warning's own statement.
			_, stmt, ok := strings.Cut(advice, "from the next chunk on: ")
			if want := `CREATE INDEX CONCURRENTLY ON "public"."ti" ("id" COLLATE "C")`; !ok || stmt != want {
				t.Fatalf("the sorted table's warning names %q, want %q:\n%s", stmt, want, advice)
			}
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		cat := &catalog{conn: conn, types: map[uint32]string{}}
		order, err := cat.byteOrder(ctx, "public."+c.table, def)
		if err != nil {
			t.Fatal(err)
		}
		if indexOrdered(def, order) != c.bytewise {
			t.Fatalf("%s (%+v): taken as ordered by an index %v, want %v", c.table, def.Columns[def.Index("id")], order, c.bytewise)
		}
		// What changefeed get says of the tables still copying.
		switch w := CopyWarnings(ctx, cfg.URI(), copying("public.tk", "public."+c.table)); {
		case c.bytewise && len(w) != 0:
			t.Fatalf("%s, read from an index: changefeed get warns %q", c.table, w)
		case !c.bytewise && (len(w) != 1 || !strings.Contains(w[0], "initial snapshot: public.ti is keyed by (id)") || !strings.Contains(w[0], `CREATE INDEX CONCURRENTLY ON "public"."ti" ("id" COLLATE "C")`)):
			t.Fatalf("%s, sorted: changefeed get warns %q", c.table, w)
		}
		if !c.bytewise {
			// Through the source as a dispatcher reads: one warning a
			// table, however many chunks sort.
			var logged bytes.Buffer
			src := &Source{cfg: cfg, log: slog.New(slog.NewTextHandler(&logged, nil)), pool: &copyPool{cfg: cfg}, cf: "text"}
			span := model.Span{Table: "public." + c.table, Key: "text"}
			for range 3 {
				if ch, err := src.ReadChunk(ctx, span, model.CopyProgress{}, source.ChunkAsk{Rows: limit}, func(*source.Chunk) bool { return true }, func(*source.Chunk) {}); err != nil || !ch.Full {
					t.Fatalf("a chunk of %s through the source: %v", c.table, err)
				}
			}
			src.pool.close()
			if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "CREATE INDEX CONCURRENTLY ON") {
				t.Fatalf("three sorted chunks of %s logged %d warnings, want 1 naming the index:\n%s", c.table, n, logged.String())
			}
		}
		var sorted []string
		reads := 0
		seen := sourcetest.ChunkedSpans(t, "public."+c.table, "text", []string{"", "8", "C1", "c1", ""}, func(span model.Span, copied model.CopyProgress, chunk int) {
			if chunk != 1 {
				return
			}
			plan := chunkPlan(t, conn, def, order, span, copied, limit)
			indexed := !strings.Contains(plan, "Sort") && strings.Contains(plan, "Index Scan using "+c.index+" ") && strings.Contains(plan, "Index Cond")
			if c.bytewise && !indexed || !c.bytewise && !strings.Contains(plan, "Sort") {
				t.Fatalf("a chunk of %s: a range scan of index %q %v, want %v:\n%s", c.table, c.index, indexed, c.bytewise, plan)
			}
		}, func(span model.Span, copied model.CopyProgress) *source.Chunk {
			reads++
			ch, why, err := readRange(ctx, conn, cfg, span, copied, halfGrown(reads, limit), func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
			if err != nil {
				t.Fatal(err)
			}
			if why != "" {
				sorted = append(sorted, why)
			}
			return ch
		})
		if c.bytewise != (len(sorted) == 0) {
			t.Fatalf("%s: read from an index %v, but its full chunks warned of sorts %d times: %q", c.table, c.bytewise, len(sorted), sorted)
		}
		if len(sorted) > 0 {
			advice = sorted[0]
		}
		var upstream int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+c.table).Scan(&upstream); err != nil {
			t.Fatal(err)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("%s: row %q copied %d times", c.table, id, n)
			}
		}
		if len(seen) != upstream || upstream < rows*9/10 {
			t.Fatalf("%s: copied %d rows of %d upstream", c.table, len(seen), upstream)
		}
	}
}

// BenchmarkTextKeyChunks reads a table of 200,000 rows keyed by text in
// the database's default collation, C (its index in the bytes' order),
// in chunks of 4,096, with the index's range scans against the same
// queries in the bytes' order by COLLATE "C", which a key in another
// collation is read with (sorted), in the same run, in turn.
//
//	go test -run '^$' -bench TextKeyChunks -benchtime 3x ./internal/engine/source/postgres
func BenchmarkTextKeyChunks(b *testing.B) {
	const rows = 200_000
	_, dsn := newDB(b, fmt.Sprintf(`CREATE TABLE tb (id text PRIMARY KEY, v text);
		INSERT INTO tb SELECT md5(g::text), md5(g::text) FROM generate_series(1, %d) g; ANALYZE tb`, rows))
	benchIndexAgainstTextOrder(b, dsn, "tb", "text", rows, func(def *source.TableDef) chunkQuery {
		return func(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
			return textOrderQuery(quoteQualified(span.Table), def, byteOrder{"id": ""}, span, copied, limit, "")
		}
	})
}

// Only an index that can give a chunk's order counts: not a partial one,
// not one in another direction per column, not one of other operators
// (text_pattern_ops), of the key's columns in another order, or of an
// expression; each of those leaves the table sorted. One in the reverse
// order on every column is read backwards.
func TestOnlyAnIndexInTheKeysOrderServesIt(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE tr (a text COLLATE "und-x-icu", b int4, PRIMARY KEY (a, b));
		INSERT INTO tr SELECT md5(g::text), g FROM generate_series(1, 3000) g;
		CREATE INDEX partial ON tr (a COLLATE "C", b) WHERE b > 0;
		CREATE INDEX mixed ON tr (a COLLATE "C" DESC, b);
		CREATE INDEX pattern ON tr (a COLLATE "C" text_pattern_ops, b);
		CREATE INDEX swapped ON tr (b, a COLLATE "C");
		CREATE INDEX expression ON tr ((lower(a)) COLLATE "C", b)`)
	ctx := context.Background()
	_, conn, def := chunkReader(t, dsn, "tr")
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	if order, err := cat.byteOrder(ctx, "public.tr", def); err != nil || indexOrdered(def, order) {
		t.Fatalf("tr taken as ordered by an index (%v, %v) of partial, mixed, pattern, swapped and expression indexes", order, err)
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX reverse ON tr (a COLLATE "C" DESC, b DESC)`); err != nil {
		t.Fatal(err)
	}
	order, err := cat.byteOrder(ctx, "public.tr", def)
	if err != nil || !indexOrdered(def, order) {
		t.Fatalf("tr with an index in the reverse order on every column: not taken as ordered by it (%v, %v)", order, err)
	}
	from, _ := model.EncodeKeyValues("text,int4", []string{"8", "0"})
	if plan := chunkPlan(t, conn, def, order, model.Span{Table: "public.tr", Key: "text,int4", Start: from}, model.CopyProgress{}, 100); strings.Contains(plan, "Sort") || !strings.Contains(plan, "Scan Backward using reverse") {
		t.Fatalf("a chunk of tr is not read backwards from the reverse index:\n%s", plan)
	}
}

// copying is CopyWarnings' tables still copying, their partitions' keys
// not told.
func copying(tables ...string) map[string]source.CopyingTable {
	out := map[string]source.CopyingTable{}
	for _, t := range tables {
		out[t] = source.CopyingTable{}
	}
	return out
}
