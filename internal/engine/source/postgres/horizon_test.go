package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A partition's copy stops at the last key its range held when its first
// full chunk was read (model.CopyProgress.Horizon): rows written after
// that and keyed after it are the stream's, so a range that grows as it
// copies (a serial key's last partition, written faster than its chunks
// go through the stream) is copied to an end all the same. Rows written
// later inside the horizon are copied as before. In every order chunks
// are read in: an integer's, text sorted by its bytes, a uuid's index;
// and for a span cut below the table's last key.
func TestACopyStopsAtTheKeyLastWhenItBegan(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE serial (id int8 PRIMARY KEY, v text);
		INSERT INTO serial SELECT g, md5(g::text) FROM generate_series(1, 1000) g;
		CREATE TABLE named (k text PRIMARY KEY, v int4);
		INSERT INTO named SELECT 'k' || lpad(g::text, 4, '0'), g FROM generate_series(1, 1000) g;
		CREATE TABLE ids (id uuid PRIMARY KEY, v int4);
		INSERT INTO ids SELECT md5(g::text)::uuid, g FROM generate_series(1, 1000) g`)
	ctx := context.Background()
	copyOf := func(table, keyTypes string, span model.Span, write string) ([]string, string) {
		t.Helper()
		cfg, conn, _ := chunkReader(t, dsn, table)
		return sourcetest.CopyWhileWriting(t, span, func() { psql(t, srv, dsn, write) }, func(span model.Span, copied model.CopyProgress) *source.Chunk {
			c, _, err := readRange(ctx, conn, cfg, span, copied, source.ChunkAsk{Rows: 100}, func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	}
	key := func(keyTypes, v string) string {
		k, err := model.EncodeKeyValues(keyTypes, []string{v})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	value := func(q string) string {
		t.Helper()
		db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
		out, err := srv.Psql(ctx, db, q)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	span := model.Span{Table: "public.serial", Key: "int8"}
	keys, h := copyOf("serial", "int8", span, `INSERT INTO serial SELECT g, 'new' FROM generate_series(1001, 6000) g`)
	if h != key("int8", "1000") || len(keys) != 1000 || keys[999] != h {
		t.Fatalf("a serial key's copy: horizon %q, %d keys read (the last %q), want 1000 up to 1000", model.DecodeKey("int8", h), len(keys), model.DecodeKey("int8", keys[len(keys)-1]))
	}

	// A span whose end is after the table's last key: the horizon is the
	// last key it holds.
	span = model.Span{Table: "public.serial", Key: "int8", Start: key("int8", "200"), End: key("int8", "9000")}
	keys, h = copyOf("serial", "int8", span, `INSERT INTO serial SELECT g, 'new' FROM generate_series(6001, 8000) g`)
	if h != key("int8", "6000") || len(keys) != 5801 {
		t.Fatalf("the copy of [200, 9000): horizon %q, %d keys read, want 6000 and 5,801", model.DecodeKey("int8", h), len(keys))
	}
	// One whose end is before it: the horizon is the span's last key.
	span = model.Span{Table: "public.serial", Key: "int8", Start: key("int8", "200"), End: key("int8", "700")}
	if keys, h = copyOf("serial", "int8", span, `SELECT 1`); h != key("int8", "699") || len(keys) != 500 {
		t.Fatalf("the copy of [200, 700): horizon %q, %d keys read, want 699 and 500", model.DecodeKey("int8", h), len(keys))
	}

	// Text: rows written after the horizon are the stream's, those written
	// inside it and after what is copied are copied.
	span = model.Span{Table: "public.named", Key: "text"}
	keys, h = copyOf("named", "text", span, `INSERT INTO named SELECT 'z' || g, g FROM generate_series(1, 3000) g;
		INSERT INTO named SELECT 'k0500-' || g, g FROM generate_series(1, 7) g;
		INSERT INTO named VALUES ('k0001-', 0)`)
	if h != key("text", "k1000") || len(keys) != 1007 {
		t.Fatalf("a text key's copy: horizon %q, %d keys read, want k1000 and 1,007 (1,000 and the 7 written inside the horizon after what was copied)", model.DecodeKey("text", h), len(keys))
	}

	// A uuid's: random keys written after the horizon fall on both sides
	// of it.
	span = model.Span{Table: "public.ids", Key: "uuid"}
	keys, h = copyOf("ids", "uuid", span, `INSERT INTO ids SELECT gen_random_uuid(), -g FROM generate_series(1, 3000) g`)
	first, last := model.DecodeKey("uuid", keys[99]), value(`SELECT id FROM ids WHERE v > 0 ORDER BY id DESC LIMIT 1`)
	if h != key("uuid", last) {
		t.Fatalf("a uuid key's copy: horizon %q, want %s", model.DecodeKey("uuid", h), last)
	}
	// Every row of before the copy, and those written after its first
	// chunk between that chunk's last key and the horizon.
	want := value(fmt.Sprintf(`SELECT count(*) FROM ids WHERE v > 0 OR id > '%s' AND id <= '%s'`, first, last))
	if fmt.Sprint(len(keys)) != want || want == "1000" {
		t.Fatalf("a uuid key's copy read %d keys, want %s (1,000 and those written inside its horizon)", len(keys), want)
	}
}
