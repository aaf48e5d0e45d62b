package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// heldAfterPin makes c's next create stop once it has pinned its source,
// until the returned function is called; pinned is closed as it stops.
func heldAfterPin(c *Coordinator) (pinned <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	c.afterPin = func() {
		if once.CompareAndSwap(false, true) {
			close(p)
			<-r
		}
	}
	return p, func() { close(r) }
}

// upstream is what the database holds for changefeeds: its slots and
// publications, by name.
func upstream(t *testing.T, pg *pgserver.Server) string {
	t.Helper()
	out, err := pg.Psql(context.Background(), "postgres", "SELECT 'slot ' || slot_name FROM pg_replication_slots; SELECT 'publication ' || pubname FROM pg_publication")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(out), " ")
}

// A coordinator that dies after its create made the changefeed's slot,
// before the changefeed was written, leaves a record of it in etcd: the
// next coordinator drops the slot and the publication, which would
// otherwise hold WAL on the database's disk with nothing naming them.
func TestACreateCutShortAfterItsPinIsReleasedByTheNextCoordinator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := ordersDB(t)
	f := leading(t)
	pinned, resume := heldAfterPin(f.c)
	created := make(chan error, 1)
	go func() {
		_, err := f.c.CreateChangefeed(ctx, f.term, CreateRequest{ID: "orders", Source: pg.DSN("postgres") + "&tables=public.orders", Sink: "blackhole://"})
		created <- err
	}()
	<-pinned
	if got := upstream(t, pg); got != "slot cdcctl_orders publication cdcctl_orders" {
		t.Fatalf("upstream once the create pinned: %q", got)
	}

	// Its coordinator's term ends there; another node leads.
	if _, err := f.cli.Delete(ctx, f.term.Fence.Key); err != nil {
		t.Fatal(err)
	}
	next := New(f.store, f.view, slog.New(slog.DiscardHandler))
	next.CleanupEvery, next.CreateGrace, next.ReleaseWait = 200*time.Millisecond, time.Second, 3*time.Second
	lctx, stopLead := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() { defer close(led); next.Lead(lctx, leaderTerm(t, f.cli, f.store, "capture-2")) }()
	defer func() { stopLead(); <-led }()
	waitFor(t, 30*time.Second, "the cut-short create's slot dropped and its record forgotten", func() bool {
		st, err := f.store.Load(ctx)
		return err == nil && len(st.Cleanups) == 0 && upstream(t, pg) == ""
	})

	// The old coordinator, were it still running, finds its term over.
	resume()
	if err := <-created; !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("the create of a coordinator whose term ended: %v", err)
	}
	st, err := f.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Changefeeds) != 0 || len(st.Cleanups) != 0 || upstream(t, pg) != "" {
		t.Fatalf("after all: changefeeds %v, cleanups %v, upstream %q", st.ChangefeedIDs(), st.Cleanups, upstream(t, pg))
	}
}

// A second create of a name while the first runs (a client that retried
// after its timeout) is refused, and takes nothing from the first: it
// used to adopt the first one's slot, and the loser of the two writes
// dropped the slot the winner's changefeed reads.
func TestASecondCreateOfANameWhileTheFirstRunsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := ordersDB(t)
	f := leading(t)
	// A create refused by its source keeps no record of itself.
	if _, err := f.c.CreateChangefeed(ctx, f.term, CreateRequest{ID: "orders", Source: pg.DSN("postgres") + "&tables=public.nosuch", Sink: "blackhole://"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a create of a table that does not exist: %v", err)
	}
	if _, ok, err := f.store.Cleanup(ctx, "orders"); err != nil || ok {
		t.Fatalf("a refused create's record: %v %v", ok, err)
	}

	pinned, resume := heldAfterPin(f.c)
	req := CreateRequest{ID: "orders", Source: pg.DSN("postgres") + "&tables=public.orders", Sink: "blackhole://"}
	created := make(chan error, 1)
	go func() {
		_, err := f.c.CreateChangefeed(ctx, f.term, req)
		created <- err
	}()
	<-pinned
	_, err := f.c.CreateChangefeed(ctx, f.term, req)
	if !errors.Is(err, ErrCleanupPending) || !strings.Contains(err.Error(), "a create of changefeed orders began") {
		t.Fatalf("a second create while the first runs: %v", err)
	}
	resume()
	if err := <-created; err != nil {
		t.Fatalf("the first create: %v", err)
	}
	st, err := f.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Changefeeds["orders"]; !ok || len(st.Cleanups) != 0 {
		t.Fatalf("after both: changefeeds %v, cleanups %v", st.ChangefeedIDs(), st.Cleanups)
	}
	if got := upstream(t, pg); got != "slot cdcctl_orders publication cdcctl_orders" {
		t.Fatalf("upstream after both creates: %q", got)
	}
}

// Two creates of one name that both passed the name check: the second is
// refused while the first runs, and its refusal leaves the first one's
// mark (the cleanup retries pass over a create that runs here by it).
func TestASecondCreateRunningHereKeepsTheFirstOnesMark(t *testing.T) {
	f := leading(t)
	first, second := new(byte), new(byte)
	if err := f.c.beginCreate(context.Background(), f.term, "gen-cf", "gen://?tables=1", time.Now(), first); err != nil {
		t.Fatal(err)
	}
	if err := f.c.beginCreate(context.Background(), f.term, "gen-cf", "gen://?tables=1", time.Now(), second); !errors.Is(err, ErrCleanupPending) {
		t.Fatalf("the second create: %v", err)
	}
	if m, ok := f.c.creating.Load(model.ChangefeedID("gen-cf")); !ok || m != first {
		t.Fatal("the first create's mark is gone")
	}
}
