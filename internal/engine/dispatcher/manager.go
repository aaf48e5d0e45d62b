package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Manager runs, on one node, a dispatcher for every partition the routing
// table places on this node, and reports their positions. The routing
// table in etcd is the request; the reply is a heartbeat per changefeed
// to its maintainer over the transport, which persists the positions
// with the checkpoint. A final position (a dispatcher stopped) is re-sent
// until this node sees it persisted, or the partition placed again.
type Manager struct {
	self  model.NodeID
	store *meta.Store
	view  *cluster.View
	tr    transport.Transport
	log   *slog.Logger
	cfg   ManagerConfig
	// waited is how long Run's last reconcile waited for dispatchers to
	// stop or start: not counted as its pass's work (cluster.Rest).
	// Run's only.
	waited time.Duration

	// reads reads database changefeeds' event logs on the nodes
	// maintaining them.
	reads *eventlog.Client

	// share is this node's part of the routing table, and reconciled
	// the build of it the last full reconcile worked from (reconcile's
	// goroutine only).
	share      share
	reconciled uint64
	// ended: a dispatcher's run ended by itself since the last full
	// reconcile.
	ended atomic.Bool

	mu      sync.Mutex
	running map[string]*managed // by changefeed/partition
	// byFeed is running by changefeed, for passes over some changefeeds'
	// dispatchers (reconcile.go); indexed counts its entries.
	byFeed  map[model.ChangefeedID]map[string]*managed
	indexed int
	// unsettledBefore: the last reconcile had reason to look at every
	// dispatcher (wholePassLocked).
	unsettledBefore bool
	feeds           map[model.ChangefeedID]*feed
	// finals are the positions where dispatchers stopped, by partition and
	// epoch, until acknowledged; a restart here starts from one.
	finals map[string]*final
	// finalsOf indexes finals by changefeed/partition (putFinalLocked,
	// dropFinalLocked): a start looks its partition's up (ownFinal), and
	// a changefeed restarted leaves one for each of a node's partitions,
	// which a search of all of them at each start made 10⁹ steps.
	finalsOf map[string]map[string]*final
	// failed counts the starts that failed, by changefeed/partition, for
	// the placement they were tried under.
	failed   map[string]*failedStart
	aborted  bool
	lastBeat time.Time
	// runningN is how many dispatchers ran here at the last heartbeat's
	// count (wakeGap).
	runningN atomic.Int64
	wg       sync.WaitGroup

	// recovering are the partitions whose dispatcher failed, until they
	// run healthy again (recover.go); flaps count their recent failures.
	recovering map[string]*recovery
	flaps      map[string]*flap
	// restartFeeds are changefeeds to restart here (a FAILED answer);
	// restarts, the restarts still reported in heartbeats.
	restartFeeds map[model.ChangefeedID]transport.Restart
	restarts     map[model.ChangefeedID][]transport.Restart
	wake         chan struct{}
	// more: the last reconcile left partitions to start (maxStartsPerPass).
	more bool
	// copiedSince are the changefeeds a dispatcher here finished its
	// copy of since the last heartbeat; lastEarly, when the last early
	// heartbeat went (copied.go). Under copiedMu, taken after mu when
	// both are.
	copiedMu    sync.Mutex
	copiedSince map[model.ChangefeedID]bool
	lastEarly   time.Time
	// handIns are the partitions moved here, watched for their first
	// position past the hand-over (under mu); lastHandIn, when the last
	// early heartbeat for one went (handin.go; Run's goroutine only).
	handIns    map[string]handIn
	lastHandIn time.Time
}

type managed struct {
	route meta.RouteRecord
	d     *Dispatcher
	done  chan struct{}
	err   error
	// began is when the run started: a recovery's back-off counts from
	// it (a run that failed after retrying for a while has waited).
	began time.Time
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
	src  source.Source
	sink sink.Sink
}

// close releases the feed's sink and source.
func (f *feed) close() {
	_ = f.sink.Close()
	_ = f.src.Close()
}

// ManagerConfig is what a manager is built from; nothing is set after.
type ManagerConfig struct {
	Self      model.NodeID
	Store     *meta.Store
	View      *cluster.View
	Transport transport.Transport
	// Logs is the node's event-log server (the maintainer host's): the
	// partitions of a changefeed whose reader runs here read its log
	// directly. Nil: every read goes through the transport.
	Logs *eventlog.Server
	Log  *slog.Logger
	// Interval is the most time between heartbeats (zero: 500 ms); a
	// node running few partitions beats more often (beatEvery).
	Interval time.Duration
	// HandoverTimeout bounds how long a graceful stop waits for the final
	// positions to be persisted before it leaves anyway (the partitions
	// then resume from their last persisted position: duplicates, no
	// loss). Zero: 10 s.
	HandoverTimeout time.Duration
	// Observe, if set, returns the metrics observer of a changefeed's sink.
	Observe func(cf model.ChangefeedID, scheme string) sink.Observer
	// Checkpoints, if set, is seed 003's CheckpointStore: a partition
	// handed over saves its state there, and its next owner restores and
	// checks it before it starts.
	Checkpoints checkpoint.Store
	// Sinks is what the sinks opened here share with the node (metrics,
	// the storage memory budget); its Log is the manager's.
	Sinks registry.Env
	// Metrics, if set, counts recoveries and restarts (recover.go).
	Metrics RecoveryMetrics
	// Faults, if set, injects failures (tests).
	Faults Faults
}

// Faults are the failures a test injects into a manager.
type Faults interface {
	// BeforeStart is asked before each dispatcher starts; an error fails
	// the start (seed 003's failed PreparePartition).
	BeforeStart(model.RouteEntry) error
}

// NewManager returns a manager for this node.
func NewManager(cfg ManagerConfig) *Manager {
	cfg.Interval = cmp.Or(cfg.Interval, 500*time.Millisecond)
	cfg.HandoverTimeout = cmp.Or(cfg.HandoverTimeout, 10*time.Second)
	view := cfg.View
	return &Manager{self: cfg.Self, store: cfg.Store, view: view, tr: cfg.Transport, log: cfg.Log, cfg: cfg,
		reads:   eventlog.NewClient(cfg.Transport, func(cf model.ChangefeedID) (model.NodeID, bool) { return view.State().MaintainerNode(cf) }, cfg.Self, cfg.Logs),
		running: map[string]*managed{}, feeds: map[model.ChangefeedID]*feed{}, finals: map[string]*final{}, finalsOf: map[string]map[string]*final{}, failed: map[string]*failedStart{},
		recovering: map[string]*recovery{}, flaps: map[string]*flap{}, restartFeeds: map[model.ChangefeedID]transport.Restart{},
		restarts: map[model.ChangefeedID][]transport.Restart{}, wake: make(chan struct{}, 1),
		copiedSince: map[model.ChangefeedID]bool{}, handIns: map[string]handIn{}}
}

type failedStart struct {
	cf model.ChangefeedID
	transport.FailedStart
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
	m.tr.Handle(transport.TopicRecoverAnswer, m.onRecoverAnswer)
	defer m.tr.Handle(transport.TopicRecoverAnswer, nil)
	t := time.NewTimer(m.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		ch := m.view.Changed()
		st := m.view.State()
		began := time.Now()
		m.waited = 0
		finals := m.reconcile(ctx, st)
		// Only the pass over the routing table counts: sending heartbeats
		// waits on the network, not the CPU, and resting for it would
		// delay the next hand-over (a split's pause). Nor does waiting
		// for dispatchers to stop (their sinks flushing): a drain's stops
		// took hundreds of milliseconds, and resting as long again held
		// back the next moves off the node.
		took := time.Since(began) - m.waited
		every := m.beatEvery()
		if finals || time.Since(m.lastBeat) >= every {
			m.heartbeat(ctx, st)
		} else if early := union(m.copiesEndedHere(), m.handInsPast()); early != nil {
			m.beat(ctx, st, early)
		}
		cluster.Rest(ctx, took)
		t.Reset(max(0, every-time.Since(m.lastBeat)))
		if m.moreToStart() {
			continue
		}
		select {
		case <-ch:
		case <-t.C:
		case <-m.wake:
		case <-m.copiesPending():
		case <-m.handInsPending():
		case <-ctx.Done():
		}
	}
	m.stopAll()
	m.reads.Close()
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

func (m *Manager) feedFor(ctx context.Context, e *meta.ChangefeedEntry) (*feed, error) {
	m.mu.Lock()
	f := m.feeds[e.Info.ID]
	m.mu.Unlock()
	if f != nil && f.info.SameIncarnation(e.Info) {
		return f, nil
	}
	src, err := sources.Open(ctx, e.Info.SourceURI, source.Env{Changefeed: e.Info.ID, Logs: m.reads, Log: m.log})
	if err != nil {
		return nil, err
	}
	env := m.sinkEnv()
	env.Changefeed = incarnation(e.Info)
	sk, err := registry.Open(ctx, e.Info.SinkURI, env)
	if err != nil {
		_ = src.Close()
		return nil, err
	}
	if m.cfg.Observe != nil {
		scheme, _, _ := strings.Cut(e.Info.SinkURI, ":")
		sk = sink.Observe(sk, m.cfg.Observe(e.Info.ID, scheme))
	}
	nf := &feed{info: e.Info, src: src, sink: sk}
	m.mu.Lock()
	m.feeds[e.Info.ID] = nf
	m.mu.Unlock()
	if f != nil {
		// A changefeed of the same name was removed and created again, or
		// its tables changed while it was paused; the old one's
		// dispatchers were stopped earlier in this pass.
		f.close()
	}
	return nf, nil
}

// start starts a partition's dispatcher; prepared is what preparing it
// (prepareAll) returned, resumed where its sink says it resumes
// (resumeAll).
func (m *Manager) start(ctx context.Context, st *meta.State, r meta.RouteRecord, prepared error, resumed resumePoint) error {
	e := st.Changefeeds[r.Route.Changefeed]
	f, err := m.feedFor(ctx, e)
	if err != nil {
		return err
	}
	if m.cfg.Faults != nil {
		if err := m.cfg.Faults.BeforeStart(r.Route); err != nil {
			return err
		}
	}
	if prepared != nil {
		return prepared
	}
	// The exact hand-over position if there was one; else the highest
	// durable position known (persisted, or where it stopped here: this
	// node wrote exactly up to its own final positions, whatever their
	// placement, for instance before a move that was reverted).
	from, copied := m.resumeFrom(st, r.Route)
	m.mu.Lock()
	// Running again under the same placement: no longer final.
	m.dropFinalLocked(finalKey(r.Route))
	m.mu.Unlock()
	k := key(r.Route.Changefeed, r.Route.ID)
	id := dispatcherID(r.Route)
	// An exactly-once sink has fenced the partition's earlier writers
	// and said how far their durable writes reached: past the checkpoint
	// when one crashed after a write became durable and before its
	// checkpoint was persisted. Nothing durable is written again.
	if resumed.err != nil {
		return resumed.err
	}
	if at := resumed.at; resumed.ok && at.Later(sink.Position{Ts: from, Copied: copied}) {
		m.log.Info("the sink holds more of the partition than its checkpoint says; resuming after it", "partition", r.Route.ID, "changefeed", r.Route.Changefeed, "checkpoint", from, "sink", at.Ts)
		from, copied = at.Ts, at.Copied
	}
	d, err := New(Config{
		ID: id, Epoch: r.Route.Epoch, Span: r.Route.Span, Start: from, Copied: copied,
		Source: f.src, Sink: f.sink, Now: f.src.Resolved,
		Barrier:  &tableBarrier{m: m, key: k, sink: f.sink},
		Log:      m.log.With("changefeed", r.Route.Changefeed, "span", r.Route.Span.String()),
		OnCopied: func() { m.copied(r.Route.Changefeed) },
		WakeGap:  m.wakeGap,
	})
	if err != nil {
		return err
	}
	runCtx, abort := context.WithCancel(context.Background())
	run := &managed{route: r, d: d, done: make(chan struct{}), abort: abort, began: time.Now()}
	m.mu.Lock()
	m.setRunningLocked(k, run)
	m.started(r.Route)
	if r.Route.Start != 0 && from == r.Route.Start {
		m.watchHandInLocked(k, r.Route.Changefeed, from)
	}
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer abort()
		// The run ends by Stop (graceful), by abort, or by a sink failure.
		run.err = d.Run(runCtx)
		// Its messages have settled (or it was aborted): the sink may
		// forget it.
		sink.Forget(f.sink, d.ID())
		close(run.done)
		// Only a run that ended by itself is news for reconcile (it looks
		// at every dispatcher then); one it stopped, it took out first.
		m.mu.Lock()
		if m.running[k] == run {
			m.ended.Store(true)
		}
		m.mu.Unlock()
	}()
	m.log.Info("dispatcher started", "dispatcher", d.ID(), "changefeed", r.Route.Changefeed, "span", r.Route.Span.String(), "from", from)
	return nil
}

func (m *Manager) sinkEnv() registry.Env {
	env := m.cfg.Sinks
	env.Log = m.log
	return env
}
