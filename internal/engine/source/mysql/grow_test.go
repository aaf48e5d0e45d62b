package mysql_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A partition's first chunk that may grow (source.ChunkAsk) reads on in
// its snapshot where its ranges are the key's index's: a table of 3,000
// small rows keyed by an integer is one chunk, also in byte ranges. A
// character key's copy that began in byte ranges (its progress saved
// before index order) reads what it asked first and no more: each of
// its queries sorts the rest of the range.
func TestAFirstChunkReadsOnWhereItsRangeIsTheIndexs(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE grow (id BIGINT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO grow SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000",
		"CREATE TABLE named (k VARCHAR(20) PRIMARY KEY, v INT)",
		"INSERT INTO named SELECT CONCAT('k', LPAD(seq, 5, '0')), seq FROM seq_1_to_3000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, _, err := mysql.Pin(ctx, "mysql://root@"+srv.Addr()+"/shop?tables=grow,named", "grow", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := mysql.Open(stored, source.Env{Changefeed: "grow"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	read := func(span model.Span, copied model.CopyProgress) *source.Chunk {
		t.Helper()
		c, err := src.ReadChunk(ctx, span, copied, source.ChunkAsk{Rows: 500, Most: 65536},
			func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ids := func(c *source.Chunk, col int, first int, format func(int) string) {
		t.Helper()
		for i, e := range c.Rows {
			if want := format(first + i); e.New[col].Text != want {
				t.Fatalf("row %d of the chunk is %s, want %s", i, e.New[col].Text, want)
			}
		}
	}
	ints := model.Span{Table: "shop.grow", Key: "int8"}
	c := read(ints, model.CopyProgress{})
	if len(c.Rows) != 3000 || c.Full {
		t.Fatalf("the first chunk of a table of 3,000 small rows holds %d (full %v), want all of them", len(c.Rows), c.Full)
	}
	ids(c, 0, 1, strconv.Itoa)
	after, err := model.EncodeKey("int8", "100")
	if err != nil {
		t.Fatal(err)
	}
	if c = read(ints, model.CopyProgress{}.CopiedThrough(after)); len(c.Rows) != 2900 || c.Full {
		t.Fatalf("a chunk of an integer key's byte range holds %d rows (full %v), want the 2,900 after id 100", len(c.Rows), c.Full)
	}
	ids(c, 0, 101, strconv.Itoa)

	chars := model.Span{Table: "shop.named", Key: "text"}
	if after, err = model.EncodeKey("text", "k00100"); err != nil {
		t.Fatal(err)
	}
	if c = read(chars, model.CopyProgress{}.CopiedThrough(after)); len(c.Rows) != 500 || !c.Full {
		t.Fatalf("a chunk of a character key's byte range holds %d rows (full %v), want the 500 asked and more to come", len(c.Rows), c.Full)
	}
	ids(c, 1, 101, strconv.Itoa)
}
