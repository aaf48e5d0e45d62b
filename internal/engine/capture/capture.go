// Package capture runs one capture's engine: it joins the cluster, and
// for each membership (an incarnation) runs the view, the election, the
// coordinator it may lead, the maintainer host and the dispatcher
// manager, until the node stops or the membership is lost, when it joins
// again. It owns the three ways an incarnation ends (a graceful stop, a
// crash, a lost session) in one place.
//
// The agent assembles a capture with etcd, the API and the metrics around
// it; enginetest assembles several in one process with none of those.
package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/maintainer"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Config is what one capture is built from. Every field but ID, Address
// and SessionTTL may be left zero.
type Config struct {
	ID model.NodeID
	// Address is what other nodes and clients reach this capture at (its
	// advertised API address); Version is what it registers as running.
	Address, Version string
	SessionTTL       time.Duration
	// MoveTimeout bounds a partition move (--move-timeout); zero is the
	// maintainer's default.
	MoveTimeout time.Duration
	// FollowTablesEvery is how often the coordinator looks for new
	// upstream tables (zero: its default).
	FollowTablesEvery time.Duration
	// SinkRoot is where relative file sinks go; SpoolDir where storage
	// sinks spool; EventLogDir where this capture's event logs are.
	SinkRoot, SpoolDir, EventLogDir string
	// LogMemory is the bytes this capture's event logs share for their
	// newest rows (0: every row goes to the logs' files).
	LogMemory int64
	// Checkpoints is where partition states go (nil: etcd).
	Checkpoints checkpoint.Store
	// Elector builds an incarnation's election backend (nil: etcd's
	// election on the member's session).
	Elector func(store *meta.Store, member *cluster.Member) (election.Elector, error)
	// Sinks is what the sinks opened here share (metrics, the storage
	// memory budget); the capture fills in the rest per incarnation.
	Sinks registry.Env
	// ObserveSink, if set, gives a changefeed's sink its metrics observer.
	ObserveSink func(cf model.ChangefeedID, scheme string) sink.Observer
	// Recoveries, if set, counts the dispatcher manager's recoveries.
	Recoveries dispatcher.RecoveryMetrics
	// Lead, if set, wraps every coordinator term (the agent's metrics).
	Lead func(election.LeadFunc) election.LeadFunc
	// Joined, if set, is called at each new incarnation.
	Joined func()
	// Beside are run with each incarnation, and stopped with it (the
	// agent's metrics and slot watch).
	Beside []func(context.Context, *Incarnation)
	// Faults are fault-injection hooks (tests).
	Faults Faults
}

// Faults are the engine's fault-injection hooks, for the tests of seed
// 003's failure table: each, if set, is asked before the step it names
// and fails it with its error.
type Faults struct {
	// FailStart: starting a partition's dispatcher on this capture.
	FailStart func(model.RouteEntry) error
	// FailPlace: a maintainer on this capture writing a move's placement.
	FailPlace func(model.RouteEntry) error
	// FailBootstrap: a maintainer on this capture opening its
	// changefeed's source.
	FailBootstrap func(model.ChangefeedID) error
}

// The engine's parts take their faults as interfaces (dispatcher.Faults,
// maintainer.Faults); Faults answers for both, nil hooks failing nothing.

func (f Faults) BeforeStart(r model.RouteEntry) error { return call(f.FailStart, r) }
func (f Faults) BeforePlace(r model.RouteEntry) error { return call(f.FailPlace, r) }
func (f Faults) BeforeBootstrap(cf model.ChangefeedID) error {
	return call(f.FailBootstrap, cf)
}

func call[T any](hook func(T) error, v T) error {
	if hook == nil {
		return nil
	}
	return hook(v)
}

// ErrRestartRequested ends Run after a graceful stop that a rollout asked
// for (model.RestartRequest): the process exits so that its service
// manager starts it again (cdc-agent exits with ExitRestart).
var ErrRestartRequested = errors.New("a rollout asked this capture to restart")

// Capture is one node's engine.
type Capture struct {
	cfg   Config
	store *meta.Store
	tr    transport.Transport
	log   *slog.Logger
	// logMemory is the room the event logs here share (Config.LogMemory).
	logMemory *eventlog.Memory

	mu  sync.Mutex
	cur *Incarnation

	ready atomic.Bool
	// crashing makes the incarnation's end abrupt (Crash).
	crashing atomic.Bool
	// restartAsked: the incarnation ended because a rollout asked this
	// process to restart (Run returns ErrRestartRequested).
	restartAsked atomic.Bool
	// ownLiveness is this capture's liveness as its view last saw it while
	// registered (a model.Liveness): it outlives a lost session.
	ownLiveness atomic.Int32
	started     time.Time
}

// Incarnation is one membership of a capture: a lease, and the view,
// election runner, coordinator, maintainer host and dispatcher manager
// that belong to it.
type Incarnation struct {
	Member      *cluster.Member
	View        *cluster.View
	Runner      *election.Runner
	Coordinator *coordinator.Coordinator
	Manager     *dispatcher.Manager
	Host        *maintainer.Host
	// Logs are the event logs of the readers this incarnation runs.
	Logs *eventlog.Server
}

// New returns a capture that talks to etcd through store and to other
// captures through tr.
func New(cfg Config, store *meta.Store, tr transport.Transport, log *slog.Logger) *Capture {
	c := &Capture{cfg: cfg, store: store, tr: tr, log: log}
	if cfg.LogMemory > 0 {
		c.logMemory = eventlog.NewMemory(cfg.LogMemory) // one room for every incarnation's logs
	}
	return c
}

// ID is the capture's id.
func (c *Capture) ID() model.NodeID { return c.cfg.ID }

// Ready reports whether the capture is a member with a loaded view and
// knows a coordinator.
func (c *Capture) Ready() bool { return c.ready.Load() }

// Liveness is this capture's own liveness as its view last saw it:
// Draining or Stopping once an operator drained it or it began to stop.
func (c *Capture) Liveness() model.Liveness { return model.Liveness(c.ownLiveness.Load()) }

// Current is the running incarnation, or nil between two.
func (c *Capture) Current() *Incarnation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Crash makes the capture fail the way a killed process does, as far as
// the cluster can tell: its etcd client and transport close first, so it
// can clean nothing up (no Stopping, no resign, no final positions; the
// lease just expires); the caller then ends Run's context.
func (c *Capture) Crash() {
	c.crashing.Store(true)
	_ = c.store.Client().Close()
	_ = c.tr.Close()
}

// Run joins, serves, and joins again whenever the session is lost, until
// ctx ends; then it leaves gracefully (liveness Stopping, the coordinator
// term given up, the dispatchers' final positions reported, the lease
// revoked) unless Crash was called.
func (c *Capture) Run(ctx context.Context) error {
	c.started = time.Now().UTC()
	c.restartAsked.Store(false)
	var previous meta.Previous
	for {
		member, err := c.join(ctx, previous)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c.ownLiveness.Store(int32(model.LivenessAlive))
		previous = meta.Previous{Incarnation: member.Info().Incarnation}
		if c.cfg.Joined != nil {
			c.cfg.Joined()
		}
		began := time.Now()
		if c.serve(ctx, member) {
			if c.restartAsked.Load() {
				return ErrRestartRequested
			}
			return nil
		}
		// A drained (or stopping) capture comes back Stopping: its
		// operator took it out of service, and a lapsed session does not
		// put it back.
		if l := model.Liveness(c.ownLiveness.Load()); l == model.LivenessDraining || l == model.LivenessStopping {
			previous.Stopping = true
			c.log.Warn("lost the etcd session (lease expired or etcd unreachable); joining again as a new incarnation, Stopping as it was " + l.String())
		} else {
			c.log.Warn("lost the etcd session (lease expired or etcd unreachable); joining again as a new incarnation")
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

// join registers this capture, retrying while etcd is unreachable. A
// registration left by this capture's own previous process (same address,
// which this process now holds) is revoked at once instead of waiting for
// its lease to run out.
func (c *Capture) join(ctx context.Context, previous meta.Previous) (*cluster.Member, error) {
	hostname, _ := os.Hostname()
	info := model.NodeInfo{ID: c.cfg.ID, Address: c.cfg.Address, Hostname: hostname, Version: c.cfg.Version, PID: os.Getpid(), StartedAt: c.started, Features: model.BuildFeatures}
	backoff := 200 * time.Millisecond
	for {
		jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		member, err := cluster.Join(jctx, c.store, info, c.cfg.SessionTTL, previous)
		cancel()
		if err == nil {
			c.log.Info("joined the cluster", "incarnation", fmt.Sprintf("%x", member.Info().Incarnation))
			return member, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var inUse *meta.ErrNodeIDInUse
		if errors.As(err, &inUse) {
			// Same host, same address: this process holds that address now,
			// so the registered process cannot be serving it any more.
			if inUse.Existing.Address != c.cfg.Address || inUse.Existing.Hostname != hostname || hostname == "" || inUse.Existing.Incarnation == 0 {
				return nil, err
			}
			c.log.Warn("a previous process of this node on this host is still registered; this process holds its address, so revoking its lease",
				"previous_pid", inUse.Existing.PID)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, rerr := c.store.Client().Revoke(rctx, clientv3.LeaseID(inUse.Existing.Incarnation))
			cancel()
			if rerr != nil {
				c.log.Warn("could not revoke the previous registration; waiting for it to expire", "err", rerr)
			} else {
				continue
			}
		} else {
			c.log.Warn("cannot join the cluster yet; retrying (check that --etcd points at a running etcd)", "etcd", c.store.Client().Endpoints(), "err", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
