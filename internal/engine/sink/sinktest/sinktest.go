// Package sinktest runs dispatchers against a sink as a node's manager
// runs them, under a live generator's load, for the sinks' tests: a
// partition resumed where its sink says, and cut short like kill -9.
package sinktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Live is a generator of a gen:// URI producing from now on.
func Live(t testing.TB, uri string) *gen.Generator {
	t.Helper()
	cfg, err := gen.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StartMillis = time.Now().UnixMilli()
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Run is a running dispatcher.
type Run struct {
	D    *dispatcher.Dispatcher
	Done chan error // what Run returned
	// Crash ends it as kill -9 would: nothing more is flushed.
	Crash context.CancelFunc
}

// Stop stops it gracefully and returns where it stopped.
func (r Run) Stop(t testing.TB) model.Ts {
	t.Helper()
	final, err := r.D.Stop(context.Background())
	if err != nil {
		t.Fatalf("stop %s: %v", r.D.ID(), err)
	}
	<-r.Done
	return final
}

// WaitPast waits until the dispatcher's checkpoint is past ts: progress,
// not time, since on a loaded machine a few hundred milliseconds once
// held too few flushes for a crash to cut.
func (r Run) WaitPast(t testing.TB, ts model.Ts) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); r.D.Checkpoint() <= ts; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's checkpoint stayed at %s, not past %s, for 30 s", r.D.ID(), r.D.Checkpoint(), ts)
		}
	}
}

// Resume starts partition part's dispatcher of epoch on s as a node's
// manager does: the sink is asked first where the partition resumes (an
// exactly-once sink fences its earlier writers), and the dispatcher
// starts from the later of that and checkpoint, which it returns.
func Resume(t testing.TB, g *gen.Generator, s sink.Sink, part string, epoch uint64, span model.Span, checkpoint model.Ts) (Run, model.Ts) {
	t.Helper()
	id := fmt.Sprintf("%s.%d", part, epoch)
	from := checkpoint
	at, ok, err := sink.Resume(context.Background(), s, sink.Writer{Dispatcher: id, Partition: part, Epoch: epoch})
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	if ok && at.Ts > from {
		from = at.Ts
	}
	now := func() model.Ts { return model.TsFromTime(time.Now()) }
	d, err := dispatcher.New(dispatcher.Config{ID: id, Epoch: epoch, Span: span, Start: from, Source: g, Sink: s, Now: now, BatchSize: 64, Idle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := Run{D: d, Done: make(chan error, 1), Crash: cancel}
	go func() { r.Done <- d.Run(ctx) }()
	return r, from
}
