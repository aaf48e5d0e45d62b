package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed that would share another's replication slot is refused
// before anything is created: one whose source URI is another's stored
// one pasted (its slot= and publication=), and one whose name differs
// from another's only by - and _ (the same derived slot). Sharing it,
// each skipped the other's changes, and removing either (or a refused
// create's release) dropped the other's slot. The first changefeed's
// slot is left as it was.
func TestAChangefeedThatWouldShareAnothersSlotIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := ordersDB(t)
	f := leading(t)
	c, store, term, view := f.c, f.store, f.term, f.view

	src := pg.DSN("postgres") + "&tables=public.orders"
	first, err := c.CreateChangefeed(ctx, term, CreateRequest{ID: "orders-v2", Source: src, Sink: "blackhole://"})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []CreateRequest{
		{ID: "copy", Source: first.SourceURI, Sink: "blackhole://"},
		{ID: "orders_v2", Source: src, Sink: "blackhole://"},
	} {
		_, err := c.CreateChangefeed(ctx, term, req)
		if !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "replication slot cdcctl_orders_v2") || !strings.Contains(err.Error(), "changefeed orders-v2's") {
			t.Fatalf("create %s: %v", req.ID, err)
		}
		if _, err := c.PreviewChangefeed(ctx, req); !errors.Is(err, ErrClaimed) {
			t.Fatalf("create %s --dry-run: %v", req.ID, err)
		}
	}
	out, err := pg.Psql(ctx, "postgres", "SELECT slot_name FROM pg_replication_slots; SELECT pubname FROM pg_publication")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(out), " "); got != "cdcctl_orders_v2 cdcctl_orders_v2" {
		t.Fatalf("slots and publications after the refused creates: %s", got)
	}
	// A changefeed of its own slot on the same database is created.
	if _, err := c.CreateChangefeed(ctx, term, CreateRequest{ID: "other", Source: src, Sink: "blackhole://"}); err != nil {
		t.Fatal(err)
	}

	// A pending cleanup of a removed changefeed that shared the slot (one
	// created before creates checked claims) does not release what the
	// live changefeed holds.
	if err := store.SaveCleanup(ctx, term.Fence, model.SourceCleanup{Changefeed: "ghost", Source: first.SourceURI, Since: time.Now().UTC()}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the view to show orders-v2 and ghost's cleanup", func() bool {
		st := view.State()
		_, live := st.Changefeeds["orders-v2"]
		_, pending := st.Cleanups["ghost"]
		return live && pending
	})
	c.retryCleanup(ctx, term, "ghost", view.State().Cleanups["ghost"])
	out, err = pg.Psql(ctx, "postgres", "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'cdcctl_orders_v2'")
	if err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("orders-v2's slot after the cleanups were retried: %q (%v)", out, err)
	}
}
