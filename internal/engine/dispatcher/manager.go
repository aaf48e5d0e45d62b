package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Manager runs, on one node, a dispatcher for every partition the routing
// table places on this node, and reports their checkpoints. The routing
// table in etcd is the request; the progress records are the reply: a
// maintainer that moves, or a coordinator that fails over, finds the
// truth there instead of in anyone's memory.
type Manager struct {
	self  model.NodeID
	store *meta.Store
	view  *cluster.View
	log   *slog.Logger
	// Interval between progress reports.
	Interval time.Duration

	mu      sync.Mutex
	running map[string]*managed // by changefeed/partition
	feeds   map[model.ChangefeedID]*feed
	// finals remembers where stopped dispatchers ended, by partition and
	// epoch, so a quick restart here never starts behind it (the view may
	// not show the final report yet).
	finals  map[string]model.Ts
	aborted bool
	wg      sync.WaitGroup
}

type managed struct {
	route    meta.RouteRecord
	d        *Dispatcher
	done     chan struct{}
	err      error
	reported model.Ts
	// abort ends the dispatcher's run without a final flush, when a
	// graceful stop does not finish (its sink is unreachable, say).
	abort context.CancelFunc
}

// stop stops a dispatcher gracefully, or aborts it if that takes longer
// than the timeout, and returns its final position.
func (r *managed) stop(timeout time.Duration) (model.Ts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	final, err := r.d.Stop(ctx)
	if err != nil {
		r.abort()
	}
	<-r.done
	if err != nil {
		return r.d.Checkpoint(), err
	}
	return final, nil
}

// feed is what the dispatchers of one changefeed share on this node.
type feed struct {
	info model.ChangefeedInfo
	src  *gen.Generator
	sink sink.Sink
}

// NewManager returns a manager for this node.
func NewManager(self model.NodeID, store *meta.Store, view *cluster.View, log *slog.Logger) *Manager {
	return &Manager{self: self, store: store, view: view, log: log, Interval: 500 * time.Millisecond,
		running: map[string]*managed{}, feeds: map[model.ChangefeedID]*feed{}, finals: map[string]model.Ts{}}
}

func key(cf model.ChangefeedID, pid string) string { return string(cf) + "/" + pid }

func finalKey(r model.RouteEntry) string { return fmt.Sprintf("%s/%s@%d", r.Changefeed, r.ID, r.Epoch) }

// Abort makes the coming stop abrupt: the node lost its session, its
// partitions may already run elsewhere, so nothing more is written.
func (m *Manager) Abort() {
	m.mu.Lock()
	m.aborted = true
	m.mu.Unlock()
}

// Run reconciles until ctx ends, then stops every dispatcher gracefully,
// reports their final positions and closes the sinks.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		ch := m.view.Changed()
		m.reconcile(ctx, m.view.State())
		m.report(ctx)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	m.stopAll()
	return nil
}

// Running returns how many dispatchers run here, per changefeed.
func (m *Manager) Running() map[model.ChangefeedID]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[model.ChangefeedID]int{}
	for _, r := range m.running {
		out[r.route.Route.Changefeed]++
	}
	return out
}

func (m *Manager) reconcile(ctx context.Context, st *meta.State) {
	want := map[string]meta.RouteRecord{}
	drainingHere := map[string]meta.RouteRecord{}
	for _, cf := range st.ChangefeedIDs() {
		e := st.Changefeeds[cf]
		for pid, r := range st.Partitions[cf] {
			if r.Route.Node != m.self {
				continue
			}
			switch {
			case r.Route.Status == model.PartitionDraining:
				drainingHere[key(cf, pid)] = r
			case e.Status.State == model.ChangefeedNormal:
				want[key(cf, pid)] = r
			}
		}
	}
	m.mu.Lock()
	var stale []*managed
	for k, r := range m.running {
		w, ok := want[k]
		select {
		case <-r.done:
			// Ended by itself (sink failure): start again from its checkpoint.
			m.log.Warn("dispatcher ended; restarting it from its checkpoint", "dispatcher", r.d.ID(), "err", r.err)
			m.finals[finalKey(r.route.Route)] = r.d.Checkpoint()
			delete(m.running, k)
			continue
		default:
		}
		if d, draining := drainingHere[k]; !ok && draining && d.Route.Epoch == r.route.Route.Epoch {
			// Being moved away (seed 003, MigrateOut): stop and report the
			// final position under the routing entry as it is now.
			r.route = d
			stale = append(stale, r)
			delete(m.running, k)
		} else if !ok || w.Route.Epoch != r.route.Route.Epoch {
			stale = append(stale, r)
			delete(m.running, k)
		} else if w.Revision != r.route.Revision {
			// Rewritten without a new placement: progress reports must be
			// fenced by the current revision.
			r.route = w
		}
	}
	m.mu.Unlock()
	// Stop what no longer belongs here, all at once, and report where each
	// stopped: a paused changefeed resumes exactly there; a partition that
	// moved away refuses the report (its routing entry changed).
	m.stopAndReport(stale)
	// A partition being moved away that nothing runs here (this process
	// started after it was placed, say) is handed over at its last
	// reported position.
	for k, d := range drainingHere {
		m.mu.Lock()
		_, runs := m.running[k]
		// A dispatcher stopped here already reported its exact final
		// position; the (older) view must not overwrite it.
		_, known := m.finals[finalKey(d.Route)]
		m.mu.Unlock()
		p, ok := st.Progress[d.Route.Changefeed][d.Route.ID]
		if runs || known || (ok && p.Progress.Final && p.Progress.Epoch == d.Route.Epoch) {
			continue
		}
		from := st.Changefeeds[d.Route.Changefeed].Info.StartTs
		if ok && p.Progress.Checkpoint > from {
			from = p.Progress.Checkpoint
		}
		if err := m.store.ReportProgress(ctx, d, model.Progress{Checkpoint: from, Node: m.self, Epoch: d.Route.Epoch, Final: true}); err != nil && !errors.Is(err, meta.ErrStale) {
			m.log.Warn("cannot hand over a partition", "partition", d.Route.ID, "err", err)
		}
	}
	for k, r := range want {
		m.mu.Lock()
		_, runs := m.running[k]
		m.mu.Unlock()
		if runs {
			continue
		}
		if err := m.start(ctx, st, r); err != nil {
			m.log.Warn("cannot start dispatcher; will retry", "partition", r.Route.ID, "changefeed", r.Route.Changefeed, "err", err)
		}
	}
	m.closeUnusedFeeds(st)
}

func (m *Manager) feedFor(ctx context.Context, e *meta.ChangefeedEntry) (*feed, error) {
	m.mu.Lock()
	f := m.feeds[e.Info.ID]
	m.mu.Unlock()
	if f != nil && f.info.CreatedAt.Equal(e.Info.CreatedAt) {
		return f, nil
	}
	cfg, err := gen.ParseURI(e.Info.SourceURI)
	if err != nil {
		return nil, err
	}
	src, err := gen.New(cfg)
	if err != nil {
		return nil, err
	}
	sk, err := registry.Open(ctx, e.Info.SinkURI, m.log)
	if err != nil {
		return nil, err
	}
	nf := &feed{info: e.Info, src: src, sink: sk}
	m.mu.Lock()
	m.feeds[e.Info.ID] = nf
	m.mu.Unlock()
	if f != nil {
		// A changefeed of the same name was removed and created again; the
		// old one's dispatchers were stopped earlier in this pass.
		_ = f.sink.Close()
	}
	return nf, nil
}

func (m *Manager) start(ctx context.Context, st *meta.State, r meta.RouteRecord) error {
	e := st.Changefeeds[r.Route.Changefeed]
	f, err := m.feedFor(ctx, e)
	if err != nil {
		return err
	}
	from := e.Info.StartTs
	if p, ok := st.Progress[r.Route.Changefeed][r.Route.ID]; ok && p.Progress.Checkpoint > from {
		from = p.Progress.Checkpoint
	}
	m.mu.Lock()
	if f, ok := m.finals[finalKey(r.Route)]; ok && f > from {
		from = f
	}
	m.mu.Unlock()
	k := key(r.Route.Changefeed, r.Route.ID)
	d, err := New(Config{
		ID: fmt.Sprintf("%s.%d", r.Route.ID, r.Route.Epoch), Epoch: r.Route.Epoch, Span: r.Route.Span, Start: from,
		Source: f.src, Sink: f.sink, Now: func() model.Ts { return model.TsFromTime(time.Now()) },
		Barrier: &tableBarrier{m: m, key: k, sink: f.sink},
	})
	if err != nil {
		return err
	}
	runCtx, abort := context.WithCancel(context.Background())
	run := &managed{route: r, d: d, done: make(chan struct{}), reported: from, abort: abort}
	m.mu.Lock()
	m.running[key(r.Route.Changefeed, r.Route.ID)] = run
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer abort()
		// The run ends by Stop (graceful), by abort, or by a sink failure.
		run.err = d.Run(runCtx)
		close(run.done)
	}()
	m.log.Info("dispatcher started", "dispatcher", d.ID(), "changefeed", r.Route.Changefeed, "span", r.Route.Span.String(), "from", from)
	return nil
}

// report writes every dispatcher's checkpoint that moved.
func (m *Manager) report(ctx context.Context) {
	m.mu.Lock()
	runs := make([]*managed, 0, len(m.running))
	for _, r := range m.running {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	for _, r := range runs {
		cp := r.d.Checkpoint()
		if cp <= r.reported {
			continue
		}
		err := m.store.ReportProgress(ctx, r.route, model.Progress{Checkpoint: cp, Node: m.self, Epoch: r.route.Route.Epoch})
		switch {
		case err == nil:
			r.reported = cp
		case errors.Is(err, meta.ErrStale):
			m.log.Debug("progress report refused: the partition's routing entry changed", "dispatcher", r.d.ID())
		case ctx.Err() == nil:
			m.log.Warn("cannot report progress", "dispatcher", r.d.ID(), "err", err)
		}
	}
}

// stopAndReport stops dispatchers in parallel (gracefully, unless the
// manager was aborted) and reports where each ended.
func (m *Manager) stopAndReport(runs []*managed) {
	m.mu.Lock()
	aborted := m.aborted
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if aborted {
				r.abort()
				<-r.done
				return
			}
			final, _ := r.stop(30 * time.Second)
			m.mu.Lock()
			m.finals[finalKey(r.route.Route)] = final
			m.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if final > r.reported || r.route.Route.Status == model.PartitionDraining {
				err := m.store.ReportProgress(ctx, r.route, model.Progress{Checkpoint: final, Node: m.self, Epoch: r.route.Route.Epoch, Final: true})
				if err != nil && !errors.Is(err, meta.ErrStale) {
					m.log.Warn("cannot report the final position", "dispatcher", r.d.ID(), "err", err)
				}
			}
		}()
	}
	wg.Wait()
}

// stopAll stops every dispatcher and reports where each stopped, so
// whoever takes the partitions over starts exactly there; then it closes
// the sinks.
func (m *Manager) stopAll() {
	m.mu.Lock()
	runs := make([]*managed, 0, len(m.running))
	for _, r := range m.running {
		runs = append(runs, r)
	}
	m.running = map[string]*managed{}
	m.mu.Unlock()
	m.stopAndReport(runs)
	m.wg.Wait()
	m.mu.Lock()
	feeds := m.feeds
	m.feeds = map[model.ChangefeedID]*feed{}
	m.mu.Unlock()
	for _, f := range feeds {
		_ = f.sink.Close()
	}
}

// closeUnusedFeeds closes the sinks of changefeeds with nothing running here.
func (m *Manager) closeUnusedFeeds(st *meta.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inUse := map[model.ChangefeedID]bool{}
	for _, r := range m.running {
		inUse[r.route.Route.Changefeed] = true
	}
	for id, f := range m.feeds {
		e, exists := st.Changefeeds[id]
		if !inUse[id] && (!exists || !e.Info.CreatedAt.Equal(f.info.CreatedAt)) {
			_ = f.sink.Close()
			delete(m.feeds, id)
		}
	}
}

// tableBarrier is a dispatcher's side of its table's DDL barrier: it waits
// for the maintainer to open the barrier at the DDL; if its partition is
// the writer it writes the DDL and marks the barrier written; all pass
// once it is written.
type tableBarrier struct {
	m    *Manager
	key  string
	sink sink.Sink
}

func (b *tableBarrier) route() (meta.RouteRecord, bool) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	r, ok := b.m.running[b.key]
	if !ok {
		return meta.RouteRecord{}, false
	}
	return r.route, true
}

// Reached implements Barrier.
func (b *tableBarrier) Reached(ctx context.Context, dispatcher string, ddl source.Event) error {
	for {
		ch := b.m.view.Changed()
		st := b.m.view.State()
		r, ok := b.route()
		if !ok {
			return fmt.Errorf("dispatcher %s is no longer placed here", dispatcher)
		}
		rec, open := st.Barriers[r.Route.Changefeed][ddl.Table]
		if open && rec.Barrier.DDLTs > ddl.CommitTs {
			return nil // the table is already past this DDL
		}
		if open && rec.Barrier.DDLTs == ddl.CommitTs {
			if rec.Barrier.Written {
				return nil
			}
			if rec.Barrier.Writer == r.Route.ID {
				if err := b.sink.WriteDDL(ctx, ddl); err != nil {
					return err
				}
				err := b.m.store.MarkBarrierWritten(ctx, r, rec)
				if err == nil {
					b.m.log.Info("DDL written for the whole table", "table", ddl.Table, "ddl_ts", ddl.CommitTs, "writer", dispatcher)
					return nil
				}
				if !errors.Is(err, meta.ErrStale) {
					return err
				}
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
