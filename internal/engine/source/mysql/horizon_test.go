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

// A partition's copy in byte ranges stops at the last key its range held
// when its first full chunk was read (model.CopyProgress.Horizon): rows
// keyed after it are written later, and the stream carries them, so an
// auto-increment key's last partition is copied to an end while rows are
// inserted faster than its chunks go through. A span cut below the
// table's last key stops at its own. A copy in the key's index order (a
// character key under a collation that folds case) has no horizon: its
// cursor is no byte range.
func TestACopyStopsAtTheKeyLastWhenItBegan(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE serial (id BIGINT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(40))",
		"INSERT INTO serial SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000",
		"CREATE TABLE named (k VARCHAR(20) PRIMARY KEY, v INT)",
		"INSERT INTO named SELECT CONCAT('k', LPAD(seq, 5, '0')), seq FROM seq_1_to_1000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, _, err := mysql.Pin(ctx, "mysql://root@"+srv.Addr()+"/shop?tables=serial,named", "horizon", time.Now())
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

	span = model.Span{Table: "shop.serial", Key: "int8", Start: key("200"), End: key("700")}
	if keys, h = sourcetest.CopyWhileWriting(t, span, func() {}, read); h != key("699") || len(keys) != 500 {
		t.Fatalf("the copy of [200, 700): horizon %q, %d keys read, want 699 and 500", model.DecodeKey("int8", h), len(keys))
	}

	named := model.Span{Table: "shop.named", Key: "text"}
	if c := read(named, model.CopyProgress{}); !c.Full || !c.Ordered || c.Horizon != "" {
		t.Fatalf("a chunk of a character key in its index's order: full %v, ordered %v, horizon %q; want a full ordered chunk without one", c.Full, c.Ordered, c.Horizon)
	}
}
