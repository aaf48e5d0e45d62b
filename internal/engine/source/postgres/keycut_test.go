package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition that has copied nothing yet goes by the key its span was
// cut on: once the key moved to another column of the same type (x to
// y, both int4: the span's key types cannot tell), its first chunk is
// refused with the reason and the fix, as a partition that had copied
// part of its range is. Read under y, the table's partitions that had
// finished under x and this one would each copy a different half's
// rows, and miss the rest.
func TestAPartitionThatCopiedNothingRefusesAKeyMovedSinceItsSpanWasCut(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE c (x int4 PRIMARY KEY, y int4 NOT NULL, v text);
		INSERT INTO c SELECT g, 101 - g, 'z' FROM generate_series(1, 100) g`)
	ctx := context.Background()
	uri, _, err := Pin(ctx, dsn+"&tables=c", "cut", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	types, cols, err := src.TableKey(ctx, "public.c")
	if err != nil || types != "int4" || cols != "(x)" {
		t.Fatalf("the key c's spans are cut on: %q %q (%v), want int4 (x)", types, cols, err)
	}
	cut := model.Span{Table: "public.c", Key: types, KeyColumns: cols}
	older := model.Span{Table: "public.c", Key: types} // cut before spans kept their columns
	cfg, conn, _ := chunkReader(t, dsn, "c")
	if _, err := conn.Exec(ctx, `ALTER TABLE c DROP CONSTRAINT c_pkey, ADD PRIMARY KEY (y)`); err != nil {
		t.Fatal(err)
	}
	read := func(span model.Span) (*source.Chunk, error) {
		c, _, err := readRange(ctx, conn, cfg, span, model.CopyProgress{}, source.ChunkAsk{Rows: 1000}, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
		return c, err
	}
	if _, err := read(cut); err == nil || !strings.Contains(err.Error(), "public.c: its primary key's columns changed from (x) to (y)") ||
		!strings.Contains(err.Error(), "--copy-table public.c") {
		t.Fatalf("a partition that copied nothing read under the moved key: %v", err)
	}
	// A span stored without its columns knows only its types: it reads
	// on, as before (changefeed get compares with its table's others).
	if c, err := read(older); err != nil || len(c.Rows) != 100 || c.KeyCols != "(y)" {
		t.Fatalf("an older span's copy: %v", err)
	}
}
