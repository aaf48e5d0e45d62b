package postgres

import (
	"context"
	"strconv"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition's first chunk, whose rows' size is not known yet, reads on
// in the same snapshot once its first rows tell it: a table of 10,000
// small rows is one chunk, not a first one of 1,000 rows and another of
// the rest. Rows too large for a chunk's memory stop it where they fill
// it, and the chunks after read the rest, each row once and in key order.
func TestAFirstChunkReadsOnAsFarAsItsRowsAllow(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE small (id int8 PRIMARY KEY, v text);
		INSERT INTO small SELECT g, md5(g::text) FROM generate_series(1, 10000) g;
		CREATE TABLE wide (id int8 PRIMARY KEY, v text);
		INSERT INTO wide SELECT g, repeat(md5(g::text), 256) FROM generate_series(1, 6000) g;
		CREATE TABLE exact (id int8 PRIMARY KEY, v text);
		INSERT INTO exact SELECT g, md5(g::text) FROM generate_series(1, 1000) g`)
	ctx := context.Background()
	yes, noop := func(*source.Chunk) bool { return true }, func(*source.Chunk) {}
	read := func(table string, copied model.CopyProgress, ask source.ChunkAsk) *source.Chunk {
		t.Helper()
		cfg, conn, _ := chunkReader(t, dsn, table)
		c, _, err := readRange(ctx, conn, cfg, model.Span{Table: "public." + table, Key: "int8"}, copied, ask, yes, noop)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	inOrder := func(c *source.Chunk, first int) {
		t.Helper()
		for i, e := range c.Rows {
			if want := strconv.Itoa(first + i); e.New[0].Text != want {
				t.Fatalf("row %d of the chunk has id %s, want %s", i, e.New[0].Text, want)
			}
		}
	}

	c := read("small", model.CopyProgress{}, source.ChunkAsk{Rows: 1000, Most: 65536})
	if len(c.Rows) != 10000 || c.Full {
		t.Fatalf("the first chunk of a table of 10,000 small rows holds %d (full %v), want all of them in one", len(c.Rows), c.Full)
	}
	inOrder(c, 1)
	// Once the table has statistics, the chunk knows its rows from them
	// (its array is made for them as it grows: Chunk.Expect).
	if c.Expect != 0 {
		t.Fatalf("a table never analyzed: the chunk expects %d rows, want 0 (unknown)", c.Expect)
	}
	psql(t, srv, dsn, `ANALYZE small`)
	if c = read("small", model.CopyProgress{}, source.ChunkAsk{Rows: 1000, Most: 65536}); c.Expect != 10000 || len(c.Rows) != 10000 || cap(c.Rows) > 11250 {
		t.Fatalf("an analyzed table of 10,000 rows: the chunk expects %d and holds %d in room for %d, want 10,000 in room for at most 11,250", c.Expect, len(c.Rows), cap(c.Rows))
	}
	inOrder(c, 1)
	if c = read("small", model.CopyProgress{}, source.ChunkAsk{Rows: 1000}); len(c.Rows) != 1000 || !c.Full {
		t.Fatalf("a chunk that may not grow holds %d rows (full %v), want 1000 and more to come", len(c.Rows), c.Full)
	}
	// A first read that fills its rows and ends the table: the read on
	// finds none, and the copy ends with the chunk.
	if c = read("exact", model.CopyProgress{}, source.ChunkAsk{Rows: 1000, Most: 65536}); len(c.Rows) != 1000 || c.Full {
		t.Fatalf("the chunk of a table of exactly its first rows holds %d (full %v), want 1000 and the end", len(c.Rows), c.Full)
	}

	// 8 KiB a row: a chunk's 16 MiB hold about 2,000.
	c = read("wide", model.CopyProgress{}, source.ChunkAsk{Rows: 1000, Most: 65536})
	if len(c.Rows) <= 1000 || len(c.Rows) >= 2500 || !c.Full {
		t.Fatalf("the first chunk of rows of 8 KiB holds %d (full %v), want about 2,000 and more to come", len(c.Rows), c.Full)
	}
	inOrder(c, 1)
	got, copied := len(c.Rows), c.Through(model.CopyProgress{})
	for c.Full {
		n := len(c.Rows)
		c = read("wide", copied, source.ChunkAsk{Rows: n, Most: n})
		inOrder(c, got+1)
		got, copied = got+len(c.Rows), c.Through(copied)
	}
	if got != 6000 {
		t.Fatalf("the chunks read %d rows of 6,000", got)
	}
}

// halfGrown is what a test asks of its i-th chunk of limit rows: every
// other one is read as its first half grown to the whole (Chunk.Grow),
// so that a range's chunks stay as they were and reading on after a
// first read is proven in every key order the tests read (a sorted one
// does not grow: its chunk holds the first half).
func halfGrown(i, limit int) source.ChunkAsk {
	if i%2 == 0 && limit >= 2 {
		return source.ChunkAsk{Rows: limit / 2, Most: limit}
	}
	return source.ChunkAsk{Rows: limit}
}

// notGrown fails the test when chunk c, asked for ask, could grow and
// did not: its first read filled it and it read no more.
func notGrown(t *testing.T, c *source.Chunk, ask source.ChunkAsk) {
	t.Helper()
	if ask.Most > ask.Rows && c.Full && c.Limit == ask.Rows {
		t.Fatalf("a chunk asked for %+v read its first %d rows and no more", ask, ask.Rows)
	}
}
