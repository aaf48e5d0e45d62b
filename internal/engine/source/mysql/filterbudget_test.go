package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A partition of a character key whose rows are few where its chunks
// walk the index (three upper-case keys among 100,000 lower-case ones,
// all at the index's end under a collation that folds case): a filtered
// statement past its budget (1 ms here) is stopped by the server, the
// chunk is read again in its window without the filter, and the span
// reads without it for a while after. Its rows are all there, once.
func TestASparseSpansChunkPastItsBudgetIsReadWithoutTheFilter(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, "CREATE TABLE sparse (k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
		"INSERT INTO sparse SELECT CONCAT('k', LPAD(seq, 6, '0')), seq FROM seq_1_to_100000",
		"INSERT INTO sparse VALUES ('K999997', 1), ('K999998', 2), ('K999999', 3)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, _, err := Pin(ctx, "mysql://root@"+srv.Addr()+"/shop?tables=sparse", "sparse", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(stored, source.Env{Changefeed: "sparse"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	src.filterBudget = time.Millisecond
	upper := model.Span{Table: "shop.sparse", Key: "text", Start: "K", End: "L"}
	// The span copied chunk by chunk, as its partition does: twice.
	copyAll := func() ([]string, int) {
		t.Helper()
		var copied model.CopyProgress
		var keys []string
		for chunks := 1; ; chunks++ {
			c, err := src.ReadChunk(ctx, upper, copied, source.ChunkAsk{Rows: 500, Most: 65536},
				func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range c.Rows {
				keys = append(keys, e.Key)
			}
			if !c.Full {
				return keys, chunks
			}
			copied = c.Through(copied)
		}
	}
	for i := range 2 {
		keys, chunks := copyAll()
		if len(keys) != 3 || keys[0] != "K999997" || keys[2] != "K999999" {
			t.Fatalf("copy %d: the span's chunks hold %q, want its three rows", i, keys)
		}
		if !src.sparse(upper) {
			t.Fatalf("copy %d: the span is not known sparse after a chunk past its budget", i)
		}
		t.Logf("copy %d: %d chunks", i, chunks)
	}
	if other := (model.Span{Table: "shop.sparse", Key: "text", Start: "k05"}); src.sparse(other) {
		t.Fatal("another span is taken for sparse")
	}
}
