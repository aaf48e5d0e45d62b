package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// The manager's restart path (seed 002, R10's fallback), on its own: a
// changefeed restart stops every dispatcher of that changefeed where it
// stands, reports the restart, closes the changefeed's sink and source,
// and leaves other changefeeds alone; the next pass opens them anew and
// starts each partition exactly where it stopped. Under the generator's
// load into a storage sink, verify finds nothing lost and nothing twice.
func TestARestartStopsTheChangefeedAndStartsItAgainWhereItStopped(t *testing.T) {
	start := time.Now().Add(-time.Second).UnixMilli()
	srcURI := fmt.Sprintf("gen://?tables=2&keys=50&rate=400&start=%d", start)
	sinkURI, otherURI := "file://"+t.TempDir()+"?flush-interval=100ms", "file://"+t.TempDir()+"?flush-interval=100ms"
	const other = model.ChangefeedID("other")
	route := func(c model.ChangefeedID, pid, table string) meta.RouteRecord {
		return meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: c, Node: "n1", Epoch: 1, Status: model.PartitionActive, Span: model.Span{Table: table}}}
	}
	entry := func(c model.ChangefeedID, sinkURI string) *meta.ChangefeedEntry {
		return &meta.ChangefeedEntry{
			Info:       model.ChangefeedInfo{ID: c, SourceURI: srcURI, SinkURI: sinkURI, StartTs: model.TsFromMillis(start)},
			Status:     model.ChangefeedStatus{State: model.ChangefeedNormal},
			Maintainer: model.MaintainerPlacement{Node: "n2", Epoch: 1},
		}
	}
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: entry(cf, sinkURI), other: entry(other, otherURI)},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{
			cf:    {"p1": route(cf, "p1", "t0001"), "p2": route(cf, "p2", "t0002")},
			other: {"q1": route(other, "q1", "t0001")},
		},
	}
	hub := transport.NewHub()
	cnt := &countMetrics{answers: map[transport.RecoverState]int{}, restarts: map[string]int{}}
	m := NewManager(ManagerConfig{Self: "n1", View: cluster.Fixed(st), Transport: hub.Join("n1"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: cnt,
		HandoverTimeout: 100 * time.Millisecond}) // no maintainer here acknowledges stops
	defer m.stopAll()
	ctx := context.Background()

	m.reconcile(ctx, st)
	if n := m.Running(); n[cf] != 2 || n[other] != 1 {
		t.Fatalf("running before the restart: %v", n)
	}
	time.Sleep(time.Second) // under load
	m.mu.Lock()
	oldSink, q1 := m.feeds[cf].sink, m.running[key(other, "q1")]
	m.mu.Unlock()

	m.restartFeed(cf, transport.Restart{Reason: "recover_timeout", Err: "injected", Time: time.Now().UnixMilli()})
	if n := m.Running(); n[cf] != 0 || n[other] != 1 {
		t.Fatalf("running after the restart: %v; want none of %s, %s untouched", n, cf, other)
	}
	select {
	case <-q1.done:
		t.Fatal("the other changefeed's dispatcher stopped")
	default:
	}
	stopped := map[string]model.Ts{}
	m.mu.Lock()
	for _, f := range m.finals {
		if f.cf == cf && f.p.Final {
			stopped[f.pid] = f.p.Checkpoint
		}
	}
	reported := m.restartsToReport()[cf]
	m.mu.Unlock()
	if len(stopped) != 2 {
		t.Fatalf("exact stop positions after the restart: %v; want both partitions'", stopped)
	}
	if len(reported) != 1 || reported[0].Reason != "recover_timeout" || cnt.restarts["recover_timeout"] != 1 {
		t.Fatalf("the restart reported %+v, counted %v", reported, cnt.restarts)
	}
	err := oldSink.Write(ctx, &sink.Batch{Dispatcher: "x.1", Events: nil, OnFlushed: func(error) {}})
	if err == nil {
		t.Fatal("the changefeed's old sink still takes writes after the restart")
	}

	// The next pass opens the changefeed anew and starts each partition
	// where it stopped.
	m.reconcile(ctx, st)
	m.mu.Lock()
	newSink := m.feeds[cf].sink
	starts := map[string]model.Ts{}
	for _, pid := range []string{"p1", "p2"} {
		if r := m.running[key(cf, pid)]; r != nil {
			starts[pid] = r.d.cfg.Start
		}
	}
	m.mu.Unlock()
	if newSink == oldSink {
		t.Fatal("the restart kept the changefeed's sink")
	}
	for pid, at := range stopped {
		if starts[pid] != at {
			t.Fatalf("%s started again at %v; it stopped at %v", pid, starts[pid], at)
		}
	}
	time.Sleep(time.Second)
	m.stopAll()
	upTo := model.Ts(0)
	m.mu.Lock()
	for _, f := range m.finals {
		if f.cf == cf && f.p.Final && (upTo == 0 || f.p.Checkpoint < upTo) {
			upTo = f.p.Checkpoint
		}
	}
	m.mu.Unlock()
	g, err := gen.Open(srcURI)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Storage(ctx, g, sinkURI, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Expected == 0 {
		t.Fatalf("the sink after a restart: %+v", rep)
	}
}
