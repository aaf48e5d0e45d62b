package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/embedetcd"
	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
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
	sinkBudget *registry.StorageBudget
	// kafkaProducers hands a Kafka sink's producer id to the next sink
	// of its changefeed on this node (a changefeed restarted here).
	kafkaProducers *registry.KafkaProducers
	started        time.Time
	// drainsSeen are the drain plans whose duration the metrics observed.
	drainsSeen map[string]bool

	listening chan struct{} // closed once addr is known
	addr      string        // advertised API address

	mu    sync.Mutex
	store *meta.Store
	// engine is this node's capture, once Run has connected to etcd.
	engine *capture.Capture

	// hub, when set, connects this node to others in the same process
	// (engine tests); otherwise nodes talk gRPC on the API listener.
	hub    *transport.Hub
	faults Faults
	// blobStates is the bucket partition states go to, when
	// --checkpoint-store is a bucket URL (else etcd).
	blobStates *checkpoint.Blob
	grpc       *transport.GRPC
	// viewCatchUp is how long an API read waits for the watched view
	// before it reads etcd in full (backend.load).
	viewCatchUp time.Duration
	// retentionEvery is how often the upstream logs' retention is read
	// for the metrics (watchSlots).
	retentionEvery time.Duration
}

// Option changes how a node is assembled.
type Option func(*Node)

// Faults are the engine's fault-injection hooks (capture.Faults).
type Faults = capture.Faults

// WithFaults installs fault-injection hooks.
func WithFaults(f Faults) Option { return func(n *Node) { n.faults = f } }

// WithHub makes the node talk to the other nodes of this process through
// an in-memory transport instead of gRPC.
func WithHub(h *transport.Hub) Option { return func(n *Node) { n.hub = h } }

// WithViewCatchUp sets how long an API read waits for the watched view
// to reach etcd's revision before it reads etcd in full (default 2 s):
// a test of the view waits longer, so that only a view that never
// catches up falls back, not one slowed by a loaded machine.
func WithViewCatchUp(d time.Duration) Option { return func(n *Node) { n.viewCatchUp = d } }

// WithRetentionEvery sets how often the node reads the upstream logs'
// retention for the metrics of the changefeeds it maintains (default
// 30 s): a test reads them sooner.
func WithRetentionEvery(d time.Duration) Option { return func(n *Node) { n.retentionEvery = d } }

// crash makes the node fail the way a killed process does, as far as the
// cluster can tell (capture.Crash); the caller then ends Run.
func (n *Node) crash() {
	if c := n.engineNow(); c != nil {
		c.Crash()
	}
}

func (n *Node) engineNow() *capture.Capture {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.engine
}

// New validates the configuration and returns a node ready to Run.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every line this node logs is masked (redact.Handler), whoever
	// wrote it and whatever error it quotes.
	log = slog.New(redact.Handler(log.Handler()))
	n := &Node{cfg: cfg, log: log.With("node", cfg.NodeID), metrics: newMetrics(), sinkBudget: registry.NewStorageBudget(int64(cfg.SinkMemoryMiB) << 20), kafkaProducers: registry.NewKafkaProducers(), listening: make(chan struct{}), drainsSeen: map[string]bool{}}
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
	info, ok := cur.View.State().Nodes[id]
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
func (n *Node) Ready() bool {
	c := n.engineNow()
	return c != nil && c.Ready()
}

// Serving says whether this capture takes new work: ready, and neither
// Draining nor Stopping (/readyz: a load balancer or Kubernetes sends
// requests elsewhere while it drains).
func (n *Node) Serving() (bool, model.Liveness) {
	c := n.engineNow()
	if c == nil || !c.Ready() {
		return false, model.LivenessUnknown
	}
	l := c.Liveness()
	return l == model.LivenessAlive, l
}

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
	engine := n.newCapture(store, tr)
	n.mu.Lock()
	n.store, n.engine = store, engine
	n.mu.Unlock()

	stopServing := n.serve(ln)
	n.log.Info("API listening", "addr", ln.Addr().String(), "advertise", n.addr, "etcd", endpoints, "cluster", n.cfg.ClusterID)

	runErr := engine.Run(ctx)
	if err := stopServing(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// newCapture assembles this node's engine with the node's metrics, fault
// hooks and configuration.
func (n *Node) newCapture(store *meta.Store, tr transport.Transport) *capture.Capture {
	cfg := capture.Config{
		ID: n.ID(), Address: n.addr, Version: version.Version, SessionTTL: n.cfg.SessionTTL, MoveTimeout: n.cfg.MoveTimeout,
		FollowTablesEvery: n.cfg.FollowTablesEvery, SinkRoot: n.cfg.sinkRoot(), SpoolDir: n.cfg.spoolDir(), EventLogDir: n.cfg.eventLogDir(),
		LogMemory:   int64(n.cfg.LogMemoryMiB) << 20,
		Sinks:       registry.Env{StorageMetrics: n.metrics.storage, KafkaMetrics: n.metrics.kafka, KafkaProducers: n.kafkaProducers, StorageBudget: n.sinkBudget},
		ObserveSink: n.metrics.observeSink, Recoveries: recoveryMetrics{n.metrics},
		Lead: n.lead, Joined: n.metrics.incarnations.Inc, Faults: n.faults,
		Beside: []func(context.Context, *capture.Incarnation){
			func(ctx context.Context, inc *capture.Incarnation) {
				n.followView(ctx, inc.View, inc.Manager, inc.Logs)
			},
			func(ctx context.Context, inc *capture.Incarnation) { n.watchSlots(ctx, inc.View) },
		},
	}
	if n.blobStates != nil {
		cfg.Checkpoints = n.blobStates
	}
	if n.cfg.Election == "mysql" {
		cfg.Elector = n.mysqlElector
	}
	return capture.New(cfg, store, tr, n.log)
}

// lead wraps each coordinator term with the node's bookkeeping.
func (n *Node) lead(coordinate election.LeadFunc) election.LeadFunc {
	return func(ctx context.Context, term election.Term) {
		n.metrics.isCoordinator.Set(1)
		n.metrics.plans.leading.Store(true)
		n.metrics.termsWon.Inc()
		defer n.metrics.isCoordinator.Set(0)
		defer n.metrics.plans.leading.Store(false)
		coordinate(ctx, term)
	}
}

// followViewEvery is the least time between two passes of followView.
const followViewEvery = 200 * time.Millisecond

// followView keeps the cluster metrics in step with the view.
func (n *Node) followView(ctx context.Context, view *cluster.View, manager *dispatcher.Manager, logs *eventlog.Server) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastDrain *model.DrainRecord
	// Series are replaced, never reset: a scrape between a Reset and the
	// next Set saw every changefeed's series gone.
	liveness, tableIssues, changefeedState := &gaugeSet{vec: n.metrics.liveness}, &gaugeSet{vec: n.metrics.tableIssues}, &gaugeSet{vec: n.metrics.changefeedState}
	checkpointTs, checkpointLag, dispatchers := &gaugeSet{vec: n.metrics.checkpointTs}, &gaugeSet{vec: n.metrics.checkpointLag}, &gaugeSet{vec: n.metrics.dispatchers}
	eventLogs := &gaugeSet{vec: n.metrics.eventLogDisk}
	for ctx.Err() == nil {
		began := time.Now()
		ch := view.Changed()
		select {
		case <-view.Loaded():
			st := view.State()
			leader, hasLeader := st.Leader()
			n.metrics.nodes.Set(float64(len(st.Nodes)))
			n.metrics.cleanupsPending.Set(float64(len(st.Cleanups)))
			for id := range st.Nodes {
				for _, l := range []model.Liveness{model.LivenessAlive, model.LivenessDraining, model.LivenessStopping} {
					liveness.set(b2f(st.LivenessOf(id) == l), string(id), l.String())
				}
			}
			liveness.done()
			if hasLeader {
				n.metrics.coordinatorEpoch.Set(float64(leader.Fence.Epoch()))
			}
			for _, id := range st.ChangefeedIDs() {
				shown := st.Changefeeds[id].Status.Shown()
				issues := map[string]int{model.TableHeld: 0, model.TableDropped: 0}
				for _, ti := range st.Changefeeds[id].Status.Tables {
					issues[ti.State]++
				}
				for state, count := range issues {
					tableIssues.set(float64(count), string(id), state)
				}
				for _, s := range []model.ChangefeedState{model.ChangefeedNormal, model.ChangefeedWarning, model.ChangefeedPaused, model.ChangefeedFailed} {
					changefeedState.set(b2f(s == shown), string(id), string(s))
				}
				cp := st.Changefeeds[id].Status.CheckpointTs
				checkpointTs.set(float64(cp.Time().UnixMilli()), string(id))
				checkpointLag.set(time.Since(cp.Time()).Seconds(), string(id))
			}
			for _, g := range []*gaugeSet{tableIssues, changefeedState, checkpointTs, checkpointLag} {
				g.done()
			}
			for id, count := range manager.Running() {
				dispatchers.set(float64(count), string(id))
			}
			dispatchers.done()
			if logs != nil {
				for id, bytes := range logs.Bytes() {
					eventLogs.set(float64(bytes), string(id))
				}
				eventLogs.done()
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

// current is the node's store and its capture's running incarnation (nil
// between two, or before Run).
func (n *Node) current() (*meta.Store, *capture.Incarnation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.engine == nil {
		return n.store, nil
	}
	return n.store, n.engine.Current()
}
