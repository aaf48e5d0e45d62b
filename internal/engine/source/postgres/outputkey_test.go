package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Keys whose text cast is not their output (the text pgoutput sends and
// keys are routed by): a boolean ('true', output 't'), an inet host
// ('10.0.0.1/32', output '10.0.0.1'), a char(n) (its padding). Cut into
// partitions at their quantiles and copied chunk by chunk, every key is
// read once, by the partition its key routes to. Read in the cast's
// order, a bool key's chunks read the same keys again for ever, and an
// inet key at a partition's bound was copied by neither side.
func TestKeysAreCutAndCopiedInTheirOutputTextsOrder(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE flags (flag bool, id int4, PRIMARY KEY (flag, id));
		INSERT INTO flags SELECT g % 3 = 0, g FROM generate_series(1, 300) g;
		CREATE TABLE hosts (ip inet PRIMARY KEY);
		INSERT INTO hosts SELECT ('10.0.' || (g / 250) || '.' || (g % 250))::inet FROM generate_series(1, 300) g;
		INSERT INTO hosts VALUES ('10.0.0.0/24'), ('10.0.1.0/24'), ('::1');
		CREATE TABLE codes (c char(3) PRIMARY KEY);
		INSERT INTO codes SELECT chr(97 + g % 26) || chr(97 + g / 26) FROM generate_series(0, 299) g;
		INSERT INTO codes VALUES (E'a\t'), ('a'), (E'a\x01b')`)
	ctx := context.Background()
	uri, _, err := Pin(ctx, dsn+"&tables=flags,hosts,codes", "outkeys", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "outkeys"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, table := range []string{"public.flags", "public.hosts", "public.codes"} {
		copyAllOnce(t, src, dsn, table, 3)
	}
}

// In a database of another encoding than UTF-8, a key's text is routed
// by its UTF-8 bytes (what the reader receives), but COLLATE "C" orders
// it by its bytes in the database's encoding: in WIN1252 '€' (0x80) and
// 'Ÿ' (0x9F) come before 'é' (0xE9), in UTF-8 after it. Cut at their
// quantiles and copied in chunks, every key is read once.
func TestKeysOfADatabaseNotInUTF8AreCopiedInTheirUTF8Order(t *testing.T) {
	t.Parallel()
	_, dsn := newDBWith(t, "ENCODING 'WIN1252' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0", `
		CREATE TABLE words (w text PRIMARY KEY, n int4);
		INSERT INTO words SELECT convert_from(decode(p, 'hex'), 'UTF8') || g, g
		FROM generate_series(1, 75) g, unnest(ARRAY['e282ac', 'c5b8', 'c3a9', '61']) p`)
	ctx := context.Background()
	uri, _, err := Pin(ctx, dsn+"&tables=words", "win1252", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "win1252"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	copyAllOnce(t, src, dsn, "public.words", 4)
}

// copyAllOnce cuts table into n partitions at src's boundaries and copies
// each chunk by chunk (16 rows at a time): every key of the table must be
// read once.
func copyAllOnce(t *testing.T, src *Source, dsn, table string, n int) {
	t.Helper()
	ctx := context.Background()
	bounds, err := src.Boundaries(ctx, table, n)
	if err != nil {
		t.Fatal(err)
	}
	types, _, err := src.TableKey(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(bounds) == 0 {
		t.Fatalf("%s was not cut", table)
	}
	cfg, conn, _ := chunkReader(t, dsn, strings.TrimPrefix(table, "public."))
	edges := append(append([]string{""}, bounds...), "")
	var read []string
	for i := 0; i+1 < len(edges); i++ {
		span := model.Span{Table: table, Start: edges[i], End: edges[i+1], Key: types}
		copied := model.CopyProgress{}
		for chunks := 0; ; chunks++ {
			if chunks > 100 {
				t.Fatalf("%s %s: the copy does not end (read %d keys)", table, span, len(read))
			}
			c, _, err := readRange(ctx, conn, cfg, span, copied, halfGrown(chunks, 16), func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
			if err != nil {
				t.Fatal(err)
			}
			c.Within(span.Contains)
			for _, e := range c.Rows {
				read = append(read, e.Key)
			}
			if !c.Full {
				break
			}
			copied = copied.CopiedThrough(c.Last)
		}
	}
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(read)
	slices.Sort(sorted)
	if len(read) != rows || len(slices.Compact(sorted)) != rows {
		t.Fatalf("%s cut at %q: %d keys read (%d different), the table has %d", table, bounds, len(read), len(slices.Compact(slices.Clone(sorted))), rows)
	}
}
