package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A partition's copy stops at the last key it would read when its first
// full chunk was read (model.CopyProgress.Horizon): rows keyed after it
// are written later, and the stream carries them, so an auto-increment
// key's copy ends while rows are inserted faster than its chunks go
// through. In byte ranges (a signed integer key) the horizon is the
// span's last key; a span cut below the table's last key stops at its
// own. In the key's index order (BIGINT UNSIGNED, whose keys route as
// their digits; a character key) every partition reads the whole index,
// and the horizon is the table's last row in that order.
func TestACopyStopsAtTheKeyLastWhenItBegan(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE serial (id BIGINT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(40))",
		"INSERT INTO serial SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000",
		"CREATE TABLE useq (id BIGINT UNSIGNED PRIMARY KEY AUTO_INCREMENT, v VARCHAR(40))",
		"INSERT INTO useq SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000",
		"CREATE TABLE named (k VARCHAR(20) PRIMARY KEY, v INT)",
		"INSERT INTO named SELECT CONCAT('k', LPAD(seq, 5, '0')), seq FROM seq_1_to_1000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, _, err := mysql.Pin(ctx, "mysql://root@"+srv.Addr()+"/shop?tables=serial,useq,named", "horizon", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := mysql.Open(stored, source.Env{Changefeed: "horizon"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	read := func(span model.Span, copied model.CopyProgress) *source.Chunk {
		t.Helper()
		c, err := src.ReadChunk(ctx, span, copied, source.ChunkAsk{Rows: 100},
			func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	key := func(v string) string {
		k, err := model.EncodeKey("int8", v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	span := model.Span{Table: "shop.serial", Key: "int8"}
	keys, h := sourcetest.CopyWhileWriting(t, span, func() {
		mysqltest.Exec(t, db, "INSERT INTO serial (v) SELECT CONCAT('new', seq) FROM seq_1_to_5000")
	}, read)
	if h != key("1000") || len(keys) != 1000 || keys[999] != h {
		t.Fatalf("an auto-increment key's copy: horizon %q, %d keys read, want 1000 up to 1000", model.DecodeKey("int8", h), len(keys))
	}

	// A span whose end is after the table's last key: the horizon is
	// the last key it holds.
	span = model.Span{Table: "shop.serial", Key: "int8", Start: key("200"), End: key("9000")}
	keys, h = sourcetest.CopyWhileWriting(t, span, func() {
		mysqltest.Exec(t, db, "INSERT INTO serial (v) SELECT CONCAT('new', seq) FROM seq_1_to_2000")
	}, read)
	if h != key("6000") || len(keys) != 5801 {
		t.Fatalf("the copy of [200, 9000): horizon %q, %d keys read, want 6000 and 5,801", model.DecodeKey("int8", h), len(keys))
	}
	// One whose end is before it: the horizon is the span's last key.
	span = model.Span{Table: "shop.serial", Key: "int8", Start: key("200"), End: key("700")}
	if keys, h = sourcetest.CopyWhileWriting(t, span, func() {}, read); h != key("699") || len(keys) != 500 {
		t.Fatalf("the copy of [200, 700): horizon %q, %d keys read, want 699 and 500", model.DecodeKey("int8", h), len(keys))
	}

	// In the index's order: BIGINT UNSIGNED ('10' routes before '9').
	unsigned := model.Span{Table: "shop.useq", Key: "text"}
	text := func(v string) string {
		k, err := model.EncodeKey("text", v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keys, h = sourcetest.CopyWhileWriting(t, unsigned, func() {
		mysqltest.Exec(t, db, "INSERT INTO useq (v) SELECT CONCAT('new', seq) FROM seq_1_to_5000")
	}, read)
	if h != text("1000") || len(keys) != 1000 {
		t.Fatalf("a BIGINT UNSIGNED key's copy: horizon %q, %d keys read, want 1000 and 1,000", model.DecodeKey("text", h), len(keys))
	}
	if c := read(unsigned, model.CopyProgress{}); !c.Ordered || c.Horizon != text("6000") {
		t.Fatalf("a chunk of a BIGINT UNSIGNED key: ordered %v, horizon %q; want the index's order up to 6000", c.Ordered, model.DecodeKey("text", c.Horizon))
	}

	// A character key: rows written after the horizon in the collation's
	// order are the stream's, those inside it after the cursor copied.
	named := model.Span{Table: "shop.named", Key: "text"}
	keys, h = sourcetest.CopyWhileWriting(t, named, func() {
		mysqltest.Exec(t, db, "INSERT INTO named SELECT CONCAT('k', LPAD(seq, 5, '0')), seq FROM seq_1001_to_4000",
			"INSERT INTO named SELECT CONCAT('k00500-', seq), seq FROM seq_1_to_7",
			"INSERT INTO named VALUES ('k00001-', 0)")
	}, read)
	if h != text("k01000") || len(keys) != 1007 {
		t.Fatalf("a character key's copy: horizon %q, %d keys read, want k01000 and 1,007 (1,000 and the 7 written inside the horizon after what was copied)", model.DecodeKey("text", h), len(keys))
	}
}
