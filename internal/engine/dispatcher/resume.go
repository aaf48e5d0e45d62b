package dispatcher

// This file is the manager's side of a sink that keeps its own record of
// each partition's progress (an exactly-once sink, sink.Resumer): where a
// partition about to start resumes, and where one handed over stands.

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// resumePoint is where a sink that keeps its own record of each
// partition's progress (exactly once) says its durable writes reach.
type resumePoint struct {
	at  sink.Position
	ok  bool
	err error
}

// resumeAll asks the sinks where the partitions about to start resume,
// in parallel (an exactly-once sink fences the partition's earlier
// writers and reads its record: a round trip or two each, which one
// after another would slow a capture taking over thousands). The i-th
// answer is the i-th route's; none is asked for a route whose
// preparation failed.
func (m *Manager) resumeAll(ctx context.Context, st *meta.State, rs []meta.RouteRecord, prepared []error) []resumePoint {
	out := make([]resumePoint, len(rs))
	sinks := make([]sink.Sink, len(rs))
	for i, r := range rs {
		if prepared[i] != nil {
			continue
		}
		// Opened one after another: feedFor opens a changefeed's source
		// and sink once.
		f, err := m.feedFor(ctx, st.Changefeeds[r.Route.Changefeed])
		if err != nil {
			out[i].err = err
			continue
		}
		sinks[i] = f.sink
	}
	sem := make(chan struct{}, prepareWorkers)
	var wg sync.WaitGroup
	for i, r := range rs {
		if sinks[i] == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w := sink.Writer{Dispatcher: dispatcherID(r.Route), Partition: r.Route.ID, Epoch: r.Route.Epoch}
			at, ok, err := sink.Resume(ctx, sinks[i], w)
			if err != nil {
				err = fmt.Errorf("resume %s in the sink: %w", r.Route.ID, err)
			}
			out[i] = resumePoint{at: at, ok: ok, err: err}
		}()
	}
	wg.Wait()
	return out
}

// sinkHolds is the later of a position and where an exactly-once sink
// says the partition's durable writes reach. A partition handed over
// that nothing runs here (its dispatcher went with an earlier
// incarnation of this node, before it could say where it stopped) is
// otherwise handed over at its persisted position, which is behind what
// its dispatcher wrote: its next owner would resume after that anyway,
// but a split's new upper half has no record of its own, and would write
// the rows in between again. Asking fences the partition's earlier
// writers, as a resume does.
func (m *Manager) sinkHolds(ctx context.Context, st *meta.State, r model.RouteEntry, from model.Ts, copied model.CopyProgress) (model.Ts, model.CopyProgress) {
	e := st.Changefeeds[r.Changefeed]
	if e == nil {
		return from, copied
	}
	return m.SinkHolds(ctx, e, r, from, copied)
}

// SinkHolds is sinkHolds for a changefeed's entry: where a partition
// whose node died stands. A maintainer splitting such a partition asks
// it (maintainer.HostConfig.SinkHolds), so that the new upper half starts
// after what the whole wrote, not at its persisted checkpoint.
func (m *Manager) SinkHolds(ctx context.Context, e *meta.ChangefeedEntry, r model.RouteEntry, from model.Ts, copied model.CopyProgress) (model.Ts, model.CopyProgress) {
	f, err := m.feedFor(ctx, e)
	if err != nil {
		return from, copied
	}
	// A writer of its own, forgotten at once: nothing is written.
	w := sink.Writer{Dispatcher: dispatcherID(r) + "-handover", Partition: r.ID, Epoch: r.Epoch}
	at, ok, err := sink.Resume(ctx, f.sink, w)
	sink.Forget(f.sink, w.Dispatcher)
	if err != nil {
		m.log.Warn("cannot read where the sink holds a partition handed over; handing it over at its persisted position", "partition", r.ID, "changefeed", r.Changefeed, "err", err)
		return from, copied
	}
	if ok && at.Later(sink.Position{Ts: from, Copied: copied}) {
		m.log.Info("the sink holds more of a partition handed over than its checkpoint says; handing it over after it", "partition", r.ID, "changefeed", r.Changefeed, "checkpoint", from, "sink", at.Ts)
		return at.Ts, at.Copied
	}
	return from, copied
}

// dispatcherID names a placement's dispatcher: the partition and its
// epoch, e.g. "p7.3".
func dispatcherID(r model.RouteEntry) string { return fmt.Sprintf("%s.%d", r.ID, r.Epoch) }

// incarnation names one life of a changefeed: its id and when it was
// created. An exactly-once sink keys its record of each partition's
// progress by it, so a changefeed removed and created again under the
// same name (or a cluster set up anew, whose partition ids start over)
// never resumes after the progress of an earlier one.
func incarnation(info model.ChangefeedInfo) string {
	if info.CreatedAt.IsZero() {
		return string(info.ID)
	}
	return string(info.ID) + "@" + strconv.FormatInt(info.CreatedAt.UnixMilli(), 10)
}
