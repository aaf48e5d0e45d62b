package changefeeds

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
)

// A table written faster than its snapshot copies: new orders, with ever
// higher ids, go in at about 4,000 a second while the snapshot copies at
// 100 rows a second on each capture. The table's last partition, which
// every insert lands in, still finishes its copy while the inserts go
// on: it copies up to the last id its range held when its first full
// chunk was read (its horizon), and the stream carries the rest (before,
// it read on after the new rows as they came, and never finished). The
// table rebuilt from the sink then equals the upstream's, and every
// order was inserted once: those that existed by the copy, the new ones
// (all after the horizon) by the stream.
func TestTheLastPartitionOfATableWrittenFasterThanItCopiesFinishes(t *testing.T) {
	t.Parallel()
	tables := []string{"public.orders"}
	_, dsn := startShopOf(t, slowShopOrders)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	sink := "file://" + t.TempDir() + "?flush-interval=100ms"
	tc.CreateChangefeed("pg", dsn+"&tables=public.orders&chunk-rows=20&snapshot-rate=100", sink, 0)

	// The last partition's horizon, saved with its progress (so it is
	// still copying): the inserts begin after it.
	tc.Eventually("the last partition of orders to copy its first chunk", time.Minute, func() bool {
		st := tc.State()
		for pid, r := range st.Partitions["pg"] {
			if r.Route.Span.End == "" {
				return st.Progress["pg"][pid].Progress.Copy.Horizon != ""
			}
		}
		return false
	})

	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) // after the writer's end
	next := int64(slowShopOrders + 1)
	w := enginetest.StartWriter(t, func(ctx context.Context) error {
		_, err := conn.Exec(ctx, `INSERT INTO orders SELECT g, 'eu', 1, 'new', true, now() FROM generate_series($1::int8, $1::int8 + 199) g`, next)
		next += 200
		return err
	}, 50*time.Millisecond)
	tc.Eventually("the snapshot to finish while orders are inserted faster than it copies", time.Minute, func() bool {
		w.Failed(t)
		return strings.HasPrefix(tc.CopySummary("pg"), "done")
	})
	during := 200 * w.Writes()
	w.Stop(t)
	end := time.Now()
	// The rows there are, counted by the server: an insert cut short by
	// the cancel may have committed all the same.
	count, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer count.Close(context.Background())
	var total int64
	if err := count.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if during < 1000 {
		t.Fatalf("only %d orders were inserted while the snapshot copied: the test proves nothing", during)
	}

	rep := verifyShop(t, tc, dsn, tables, end)
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after %d new orders: %+v", total-slowShopOrders, rep)
	}
	tc.InsertedOnce("pg", "public.orders", total)
	t.Logf("%d orders inserted while the snapshot copied, %d in all: %+v", during, total-slowShopOrders, rep.TableReports)
}
