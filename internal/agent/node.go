package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/embedetcd"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/maintainer"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
	"github.com/cdcctl/cdcctl/internal/version"
)

// Node is one cdc-agent.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// tokens, if set, are the bearer tokens the API accepts
	// (--token-auth-file).
	tokens *api.Tokens
	// serverTLS and clientTLS, if set, are --tls-*: what the API and
	// transport serve with, and what this agent dials others with.
	serverTLS, clientTLS *tls.Config
	// sinkBudget bounds what every storage sink of this node holds
	// together (--sink-memory-mib).
	sinkBudget *storage.Budget
	started    time.Time
	// drainsSeen are the drain plans whose duration the metrics observed.
	drainsSeen map[string]bool

	ready     atomic.Bool
	listening chan struct{} // closed once addr is known
	addr      string        // advertised API address

	mu    sync.Mutex
	store *meta.Store
	cur   *incarnation

	// crashing makes the next stop abrupt (tests of crash recovery): see crash.
	crashing atomic.Bool
	cli      *clientv3.Client
	// ownLiveness is this node's liveness as its view last saw it while
	// registered (a model.Liveness): it outlives a lost session.
	ownLiveness atomic.Int32

	// hub, when set, connects this node to others in the same process
	// (engine tests); otherwise nodes talk gRPC on the API listener.
	hub           *transport.Hub
	faults        Faults
	etcdIntercept grpc.UnaryClientInterceptor
	// blobStates is the bucket partition states go to, when
	// --checkpoint-store is a bucket URL (else etcd).
	blobStates *checkpoint.Blob
	tr         transport.Transport
	grpc       *transport.GRPC
}

// Option changes how a node is assembled.
type Option func(*Node)

// Faults are the engine's fault-injection hooks, for the tests of seed
// 003's failure table: each, if set, is asked before the step it names
// and fails it with its error.
type Faults struct {
	// FailStart: starting a partition's dispatcher on this node.
	FailStart func(model.RouteEntry) error
	// FailPlace: a maintainer on this node writing a move's placement.
	FailPlace func(model.RouteEntry) error
	// FailBootstrap: a maintainer on this node opening its changefeed's
	// source.
	FailBootstrap func(model.ChangefeedID) error
}

// WithFaults installs fault-injection hooks.
func WithFaults(f Faults) Option { return func(n *Node) { n.faults = f } }

// WithEtcdInterceptor adds a view of every unary etcd request the node
// makes (tests audit the coordinator's fenced writes with it).
func WithEtcdInterceptor(i grpc.UnaryClientInterceptor) Option {
	return func(n *Node) { n.etcdIntercept = i }
}

// WithHub makes the node talk to the other nodes of this process through
// an in-memory transport instead of gRPC.
func WithHub(h *transport.Hub) Option { return func(n *Node) { n.hub = h } }

// crash makes the node fail the way a killed process does, as far as the
// cluster can tell: its etcd client closes first, so it can clean nothing
// up (no Stopping, no resign, no final positions, the lease just expires);
// the caller then ends Run.
func (n *Node) crash() {
	n.crashing.Store(true)
	n.mu.Lock()
	cli := n.cli
	n.mu.Unlock()
	if cli != nil {
		_ = cli.Close()
	}
	if tr := n.transport(); tr != nil {
		_ = tr.Close()
	}
}

func (n *Node) transport() transport.Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tr
}

// incarnation is one membership of this process: a lease, the view and
// the election runner that belong to it.
type incarnation struct {
	member  *cluster.Member
	view    *cluster.View
	runner  *election.Runner
	coord   *coordinator.Coordinator
	manager *dispatcher.Manager
}

// New validates the configuration and returns a node ready to Run.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every line this node logs is masked (redact.Handler), whoever
	// wrote it and whatever error it quotes.
	log = slog.New(redact.Handler(log.Handler()))
	n := &Node{cfg: cfg, log: log.With("node", cfg.NodeID), metrics: newMetrics(), sinkBudget: storage.NewBudget(int64(cfg.SinkMemoryMiB) << 20), listening: make(chan struct{}), drainsSeen: map[string]bool{}}
	for _, o := range opts {
		o(n)
	}
	serverTLS, clientTLS, err := cfg.tlsConfigs()
	if err != nil {
		return nil, usageError{err}
	}
	n.serverTLS, n.clientTLS = serverTLS, clientTLS
	if cfg.TokenAuthFile != "" {
		tokens, err := api.LoadTokens(cfg.TokenAuthFile)
		if err != nil {
			return nil, usageError{err}
		}
		n.tokens = tokens
	}
	if n.hub == nil {
		n.grpc = transport.NewGRPC(n.ID(), n.resolve)
		n.grpc.Observe(n.metrics.transport)
		if clientTLS != nil {
			n.grpc.UseTLS(clientTLS)
		}
	}
	return n, nil
}

// resolve finds another node's address in this node's view.
func (n *Node) resolve(id model.NodeID) (string, bool) {
	_, cur := n.current()
	if cur == nil {
		return "", false
	}
	info, ok := cur.view.State().Nodes[id]
	return info.Info.Address, ok && info.Info.Address != ""
}

// ID is the node's id.
func (n *Node) ID() model.NodeID { return model.NodeID(n.cfg.NodeID) }

// Addr blocks until the API listens and returns its advertised address.
func (n *Node) Addr(ctx context.Context) (string, error) {
	select {
	case <-n.listening:
		return n.addr, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Ready reports whether the node is a member with a loaded view and knows
// a coordinator.
func (n *Node) Ready() bool { return n.ready.Load() }

// Run serves until ctx ends, then leaves gracefully: liveness → Stopping,
// resign if coordinator, revoke the lease, stop the API. It returns nil
// after a graceful stop.
func (n *Node) Run(ctx context.Context) error {
	n.started = time.Now().UTC()
	ln, err := net.Listen("tcp", n.cfg.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on --addr %s: %v; is another agent running there? choose another --addr", n.cfg.Addr, err)
	}
	n.addr = n.cfg.AdvertiseAddr
	if n.addr == "" {
		n.addr = ln.Addr().String()
	}
	close(n.listening)
	// Event logs an earlier run left (a crash) are stale: a reader
	// rebuilds its log from the checkpoint.
	if err := os.RemoveAll(n.cfg.eventLogDir()); err != nil {
		n.log.Warn("cannot clear the event logs of an earlier run", "dir", n.cfg.eventLogDir(), "err", err)
	}

	if n.cfg.CheckpointStore != "" && n.cfg.CheckpointStore != "etcd" {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := checkpoint.OpenBlob(octx, n.cfg.CheckpointStore, n.cfg.ClusterID)
		cancel()
		if err != nil {
			ln.Close()
			return err
		}
		defer b.Close()
		n.blobStates = b
	}

	if err := n.checkElection(ctx); err != nil {
		ln.Close()
		return err
	}

	endpoints := n.cfg.Etcd
	if len(endpoints) == 0 {
		srv, err := embedetcd.Start(embedetcd.Config{Dir: n.cfg.etcdDir(), ClientAddr: n.cfg.EmbedEtcdAddr, Name: n.cfg.NodeID})
		if err != nil {
			ln.Close()
			return fmt.Errorf("%w (choose another --embed-etcd-addr, or pass --etcd to use an existing etcd)", err)
		}
		defer srv.Close()
		endpoints = []string{srv.Endpoint()}
		n.log.Info("started embedded etcd", "endpoint", srv.Endpoint(), "dir", n.cfg.etcdDir())
	}
	dial := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(n.metrics.etcd.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(n.metrics.etcd.StreamClientInterceptor()),
	}
	if n.etcdIntercept != nil {
		dial = append(dial, grpc.WithChainUnaryInterceptor(n.etcdIntercept))
	}
	cli, err := n.cfg.etcdClient(endpoints, dial...)
	if err != nil {
		ln.Close()
		return err
	}
	defer cli.Close()
	store := meta.NewStore(cli, n.cfg.ClusterID)
	var tr transport.Transport = n.grpc
	if n.hub != nil {
		tr = n.hub.Join(n.ID())
	}
	defer tr.Close()
	n.mu.Lock()
	n.store, n.cli, n.tr = store, cli, tr
	n.mu.Unlock()

	stopServing := n.serve(ln)
	n.log.Info("API listening", "addr", ln.Addr().String(), "advertise", n.addr, "etcd", endpoints, "cluster", n.cfg.ClusterID)

	runErr := n.runIncarnations(ctx, store)
	if err := stopServing(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// runIncarnations joins, serves, and joins again whenever the session is
// lost, until ctx ends.
func (n *Node) runIncarnations(ctx context.Context, store *meta.Store) error {
	var previous meta.Previous
	for {
		member, err := n.join(ctx, store, previous)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n.ownLiveness.Store(int32(model.LivenessAlive))
		previous = meta.Previous{Incarnation: member.Info().Incarnation}
		n.metrics.incarnations.Inc()
		began := time.Now()
		graceful := n.serveIncarnation(ctx, store, member)
		if graceful {
			return nil
		}
		// A drained (or stopping) capture comes back Stopping: its
		// operator took it out of service, and a lapsed session does not
		// put it back.
		if l := model.Liveness(n.ownLiveness.Load()); l == model.LivenessDraining || l == model.LivenessStopping {
			previous.Stopping = true
			n.log.Warn("lost the etcd session (lease expired or etcd unreachable); joining again as a new incarnation, Stopping as it was " + l.String())
		} else {
			n.log.Warn("lost the etcd session (lease expired or etcd unreachable); joining again as a new incarnation")
		}
		if time.Since(began) < time.Second {
			// Do not spin against an etcd that keeps dropping us.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// join registers this node, retrying while etcd is unreachable. A
// registration left by this node's own previous process (same address,
// which this process now holds) is revoked at once instead of waiting for
// its lease to run out.
func (n *Node) join(ctx context.Context, store *meta.Store, previous meta.Previous) (*cluster.Member, error) {
	hostname, _ := os.Hostname()
	info := model.NodeInfo{ID: n.ID(), Address: n.addr, Hostname: hostname, Version: version.Version, PID: os.Getpid(), StartedAt: n.started}
	backoff := 200 * time.Millisecond
	for {
		jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		member, err := cluster.Join(jctx, store, info, n.cfg.SessionTTL, previous)
		cancel()
		if err == nil {
			n.log.Info("joined the cluster", "incarnation", fmt.Sprintf("%x", member.Info().Incarnation))
			return member, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var inUse *meta.ErrNodeIDInUse
		if errors.As(err, &inUse) {
			// Same host, same address: this process holds that address now,
			// so the registered process cannot be serving it any more.
			if inUse.Existing.Address != n.addr || inUse.Existing.Hostname != hostname || hostname == "" || inUse.Existing.Incarnation == 0 {
				return nil, err
			}
			n.log.Warn("a previous process of this node on this host is still registered; this process holds its address, so revoking its lease",
				"previous_pid", inUse.Existing.PID)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, rerr := store.Client().Revoke(rctx, clientv3.LeaseID(inUse.Existing.Incarnation))
			cancel()
			if rerr != nil {
				n.log.Warn("could not revoke the previous registration; waiting for it to expire", "err", rerr)
			} else {
				continue
			}
		} else {
			n.log.Warn("cannot join the cluster yet; retrying (check that --etcd points at a running etcd)", "etcd", store.Client().Endpoints(), "err", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// serveIncarnation runs the view, the election and the coordinator for one
// membership. It returns true after a graceful stop (ctx ended) and false
// when the membership was lost.
func (n *Node) serveIncarnation(ctx context.Context, store *meta.Store, member *cluster.Member) bool {
	ictx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view := cluster.NewView(store, n.log)
	coord := coordinator.New(store, view, n.log)
	coord.SinkRoot, coord.SpoolDir = n.cfg.sinkRoot(), n.cfg.spoolDir()
	coord.FollowEvery = n.cfg.FollowTablesEvery
	elector, err := n.elector(store, member)
	if err != nil {
		n.log.Error("cannot set up the election; joining again", "err", err)
		member.Abandon()
		return false
	}
	if c, ok := elector.(interface{ Close() error }); ok {
		defer c.Close()
	}
	runner := election.NewRunner(n.ID(), elector, view, store, n.lead(coord), n.log)
	tr := n.transport()
	// The node's event logs: served to other nodes by the maintainer
	// host, read directly by this node's dispatchers.
	logs := eventlog.NewServer()
	manager := dispatcher.NewManager(n.ID(), store, view, tr, logs, n.log)
	manager.Observe = n.metrics.observeSink
	manager.Metrics = recoveryMetrics{n.metrics}
	// Sinks ask the member's tenure before each write: a node frozen past
	// its lease must not write once it wakes (cluster.Tenure).
	manager.Sinks = registry.Env{StorageMetrics: n.metrics.storage, KafkaMetrics: n.metrics.kafka, StorageBudget: n.sinkBudget, Tenure: member.Tenure(), FileRoot: n.cfg.sinkRoot(), SpoolDir: n.cfg.spoolDir()}
	manager.FailStart = n.faults.FailStart
	host := maintainer.NewHost(n.ID(), store, view, tr, logs, n.log)
	host.MoveTimeout, host.FailPlace, host.LogDir = n.cfg.MoveTimeout, n.faults.FailPlace, n.cfg.eventLogDir()
	host.FailBootstrap = n.faults.FailBootstrap
	// Consumers learn the checkpoint from the sink (seed 004): opened
	// here, on the maintainer's node, apart from the dispatchers' sinks.
	marks := registry.NewPublisher(registry.Env{Log: n.log, StorageMetrics: n.metrics.storage, KafkaMetrics: n.metrics.kafka, Tenure: member.Tenure(), FileRoot: n.cfg.sinkRoot(), SpoolDir: n.cfg.spoolDir()})
	host.Checkpointed = marks.Publish
	var states checkpoint.Store = checkpoint.Etcd{Store: store}
	if n.blobStates != nil {
		states = n.blobStates
	}
	manager.Checkpoints, host.Checkpoints = states, states
	inc := &incarnation{member: member, view: view, runner: runner, coord: coord, manager: manager}

	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{view.Run, runner.Run, host.Run, func(c context.Context) error { n.followView(c, view, manager); return nil },
		func(c context.Context) error { marks.Run(c); return nil }, func(c context.Context) error { n.watchSlots(c, view); return nil }} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(ictx)
		}()
	}
	// The dispatchers stop on their own signal, after the election has
	// been given up, so they can still report their final positions.
	mctx, stopDispatchers := context.WithCancel(context.Background())
	defer stopDispatchers()
	managerDone := make(chan struct{})
	go func() {
		defer close(managerDone)
		_ = manager.Run(mctx)
	}()
	n.mu.Lock()
	n.cur = inc
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.cur = nil
		n.mu.Unlock()
		n.ready.Store(false)
	}()

	select {
	case <-ctx.Done():
		n.ready.Store(false)
		if n.crashing.Load() {
			manager.Abort()
			stopDispatchers()
			<-managerDone
			cancel()
			wg.Wait()
			return true
		}
		n.stopGracefully(member, runner)
		// Dispatchers stop gracefully and report exactly where they
		// stopped; whoever takes their partitions starts there.
		stopDispatchers()
		<-managerDone
		cancel()
		wg.Wait()
		if err := member.Leave(); err != nil {
			n.log.Warn("could not revoke the lease; the registration will expire on its own", "err", err)
		}
		n.log.Info("left the cluster")
		return true
	case <-member.Lost():
		// Our partitions may already run elsewhere: stop writing at once.
		manager.Abort()
		stopDispatchers()
		<-managerDone
		cancel()
		wg.Wait()
		member.Abandon()
		return false
	}
}

// stopGracefully moves this node to Stopping and waits for the runner to
// give up the coordinator term, so that another node takes over at once
// instead of after the lease TTL.
func (n *Node) stopGracefully(member *cluster.Member, runner *election.Runner) {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := member.Stop(sctx); err != nil {
		n.log.Warn("could not set liveness to Stopping", "err", err)
	} else {
		n.log.Info("liveness is now Stopping")
	}
	for {
		if _, leading := runner.Current(); !leading {
			return
		}
		select {
		case <-sctx.Done():
			n.log.Warn("still coordinator after 10s of shutdown; leaving anyway")
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lead wraps the coordinator's term with the node's bookkeeping.
func (n *Node) lead(coord *coordinator.Coordinator) election.LeadFunc {
	return func(ctx context.Context, term election.Term) {
		n.metrics.isCoordinator.Set(1)
		n.metrics.plans.leading.Store(true)
		n.metrics.termsWon.Inc()
		defer n.metrics.isCoordinator.Set(0)
		defer n.metrics.plans.leading.Store(false)
		coord.Lead(ctx, term)
	}
}

// followViewEvery is the least time between two passes of followView.
const followViewEvery = 200 * time.Millisecond

// followView keeps readiness and the cluster metrics in step with the view.
func (n *Node) followView(ctx context.Context, view *cluster.View, manager *dispatcher.Manager) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastDrain *model.DrainRecord
	for ctx.Err() == nil {
		began := time.Now()
		ch := view.Changed()
		select {
		case <-view.Loaded():
			st := view.State()
			_, registered := st.Nodes[n.ID()]
			if registered {
				n.ownLiveness.Store(int32(st.LivenessOf(n.ID())))
			}
			leader, hasLeader := st.Leader()
			n.ready.Store(registered && hasLeader)
			n.metrics.nodes.Set(float64(len(st.Nodes)))
			n.metrics.cleanupsPending.Set(float64(len(st.Cleanups)))
			n.metrics.liveness.Reset()
			for id := range st.Nodes {
				for _, l := range []model.Liveness{model.LivenessAlive, model.LivenessDraining, model.LivenessStopping} {
					n.metrics.liveness.WithLabelValues(string(id), l.String()).Set(b2f(st.LivenessOf(id) == l))
				}
			}
			if hasLeader {
				n.metrics.coordinatorEpoch.Set(float64(leader.Fence.Epoch()))
			}
			n.metrics.checkpointLag.Reset()
			n.metrics.checkpointTs.Reset()
			n.metrics.changefeedState.Reset()
			n.metrics.tableIssues.Reset()
			for _, id := range st.ChangefeedIDs() {
				shown := st.Changefeeds[id].Status.Shown()
				issues := map[string]int{model.TableHeld: 0, model.TableDropped: 0}
				for _, ti := range st.Changefeeds[id].Status.Tables {
					issues[ti.State]++
				}
				for state, count := range issues {
					n.metrics.tableIssues.WithLabelValues(string(id), state).Set(float64(count))
				}
				for _, s := range []model.ChangefeedState{model.ChangefeedNormal, model.ChangefeedWarning, model.ChangefeedPaused, model.ChangefeedFailed} {
					n.metrics.changefeedState.WithLabelValues(string(id), string(s)).Set(b2f(s == shown))
				}
				cp := st.Changefeeds[id].Status.CheckpointTs
				n.metrics.checkpointTs.WithLabelValues(string(id)).Set(float64(cp.Time().UnixMilli()))
				n.metrics.checkpointLag.WithLabelValues(string(id)).Set(time.Since(cp.Time()).Seconds())
			}
			n.metrics.dispatchers.Reset()
			for id, count := range manager.Running() {
				n.metrics.dispatchers.WithLabelValues(string(id)).Set(float64(count))
			}
			lastDrain = n.drainMetrics(st, lastDrain)
			n.metrics.plans.update(st)
		default:
		}
		// Counting a drain's progress reads every partition: at 20,000
		// partitions this loop, run on every write, took a sixth of a
		// drain's CPU. Metrics and readiness need no more than a few
		// passes a second.
		select {
		case <-ctx.Done():
		case <-time.After(followViewEvery - time.Since(began)):
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

func (n *Node) current() (*meta.Store, *incarnation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.store, n.cur
}
