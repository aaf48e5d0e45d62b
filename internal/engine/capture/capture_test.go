package capture_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The supervisor: a runner of an incarnation that stops by itself (none
// does by design) ends that incarnation, and the capture joins the
// cluster again and is ready, instead of running on without it. A
// graceful stop then leaves the cluster: no registration is left.
func TestARunnerThatStopsByItselfEndsItsIncarnation(t *testing.T) {
	_, cli := etcdtest.Start(t)
	store := meta.NewStore(cli, "test")
	var joins atomic.Int32
	var stopped atomic.Bool
	cfg := capture.Config{
		ID: "capture-1", Address: "engine-test/capture-1", SessionTTL: 10 * time.Second,
		SinkRoot: t.TempDir(), SpoolDir: t.TempDir(), EventLogDir: t.TempDir(),
		Joined: func() { joins.Add(1) },
		Beside: []func(context.Context, *capture.Incarnation){func(ctx context.Context, _ *capture.Incarnation) {
			if stopped.CompareAndSwap(false, true) {
				return // the first incarnation's runner gives up at once
			}
			<-ctx.Done()
		}},
	}
	c := capture.New(cfg, store, transport.NewHub().Join("capture-1"), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for joins.Load() < 2 || !c.Ready() {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("after a runner stopped by itself: %d joins, ready %v; want a second incarnation, ready", joins.Load(), c.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after a graceful stop: %v", err)
	}
	st, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Nodes[model.NodeID("capture-1")]; ok {
		t.Fatal("the capture is still registered after it left")
	}
}
