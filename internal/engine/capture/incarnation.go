package capture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/maintainer"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// serve runs one membership. It returns true after the capture stopped
// (ctx ended, gracefully or by Crash) and false when the membership was
// lost. The three endings share one sequence; they differ only in what is
// done before the dispatchers stop (a graceful stop first gives up the
// coordinator term, the other two abort the dispatchers' writes) and
// whether the lease is revoked, kept to expire, or already gone.
func (c *Capture) serve(ctx context.Context, member *cluster.Member) bool {
	inc, err := c.assemble(member)
	if err != nil {
		c.log.Error("cannot set up the election; joining again", "err", err)
		member.Abandon()
		return false
	}
	if cl, ok := inc.elector.(interface{ Close() error }); ok {
		defer cl.Close()
	}
	ictx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restart := make(chan model.RestartRequest, 1)
	// The supervisor: every runner lives as long as the incarnation. One
	// that ends before it (none does by design: each retries what fails)
	// ends the incarnation with its name and error, and the capture joins
	// again, rather than run on without it.
	type runner struct {
		name string
		run  func(context.Context) error
	}
	runners := []runner{
		{"the cluster view", inc.View.Run},
		{"the election runner", inc.Runner.Run},
		{"the maintainer host", inc.Host.Run},
		{"the readiness follower", func(ctx context.Context) error {
			c.followSelf(ctx, inc.View, member.Info().Incarnation, restart)
			return nil
		}},
		{"the checkpoint publisher", func(ctx context.Context) error { inc.marks(ctx); return nil }},
	}
	for _, b := range c.cfg.Beside {
		runners = append(runners, runner{"a node runner", func(ctx context.Context) error { b(ctx, &inc.Incarnation); return nil }})
	}
	var wg sync.WaitGroup
	ended := make(chan string, len(runners))
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.run(ictx)
			if ictx.Err() == nil {
				ended <- fmt.Sprintf("%s stopped by itself (%v)", r.name, err)
			}
		}()
	}
	// The dispatchers stop on their own signal, after the election has
	// been given up, so they can still report their final positions.
	mctx, stopDispatchers := context.WithCancel(context.Background())
	defer stopDispatchers()
	managerDone := make(chan struct{})
	go func() {
		defer close(managerDone)
		_ = inc.Manager.Run(mctx)
	}()
	c.mu.Lock()
	c.cur = &inc.Incarnation
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
		c.ready.Store(false)
	}()

	graceful, lost := false, false
	select {
	case <-ctx.Done():
		c.ready.Store(false)
		graceful = !c.crashing.Load()
	case req := <-restart:
		// A rollout asked this process to restart: it leaves as on
		// SIGTERM, and Run tells its caller to exit so that the service
		// manager starts it again.
		c.log.Info("restarting: asked by plan "+req.PlanID, "requested_at", req.RequestedAt)
		c.ready.Store(false)
		c.restartAsked.Store(true)
		graceful = true
	case <-member.Lost():
		lost = true
	case why := <-ended:
		c.log.Error(why + "; leaving this incarnation and joining again")
		lost = true
	}
	if graceful {
		c.stopGracefully(member, inc.Runner)
	} else {
		// A crash, or our partitions may already run elsewhere: stop
		// writing at once.
		inc.Manager.Abort()
	}
	// Stopped gracefully, dispatchers report exactly where they stopped;
	// whoever takes their partitions starts there.
	stopDispatchers()
	<-managerDone
	if graceful {
		// The maintainers here stay until they are placed elsewhere or
		// have persisted where the partitions of their changefeeds on
		// the other captures ended (a whole cluster stopping at once).
		inc.Host.AwaitFinals()
	}
	cancel()
	wg.Wait()
	switch {
	case lost:
		member.Abandon()
		return false
	case graceful:
		if err := member.Leave(); err != nil {
			c.log.Warn("could not revoke the lease; the registration will expire on its own", "err", err)
		}
		c.log.Info("left the cluster")
	}
	return true
}

// assembled is an incarnation and the parts of it only serve runs.
type assembled struct {
	Incarnation
	elector election.Elector
	marks   func(context.Context)
}

// assemble builds one membership's engine.
func (c *Capture) assemble(member *cluster.Member) (*assembled, error) {
	view := cluster.NewView(c.store, c.log)
	coord := coordinator.New(c.store, view, c.log)
	coord.SinkRoot, coord.SpoolDir = c.cfg.SinkRoot, c.cfg.SpoolDir
	if c.cfg.FollowTablesEvery > 0 {
		coord.FollowEvery = c.cfg.FollowTablesEvery
	}
	elector, err := c.elector(member)
	if err != nil {
		return nil, err
	}
	lead := election.LeadFunc(coord.Lead)
	if c.cfg.Lead != nil {
		lead = c.cfg.Lead(lead)
	}
	runner := election.NewRunner(c.cfg.ID, elector, view, c.store, lead, c.log)
	// The capture's event logs: served to other captures by the
	// maintainer host, read directly by this capture's dispatchers.
	logs := eventlog.NewServer()
	// Sinks ask the member's tenure before each write: a capture frozen
	// past its lease must not write once it wakes (cluster.Tenure).
	sinks := c.cfg.Sinks
	sinks.Tenure, sinks.FileRoot, sinks.SpoolDir = member.Tenure(), c.cfg.SinkRoot, c.cfg.SpoolDir
	// Flushes noted on their data files only while every capture reads
	// notes: in a rolling upgrade one of an earlier version, taking a
	// dispatcher over after a crash, would resume from the progress
	// object and write the noted rows again.
	sinks.StorageNotes = func() bool { return view.AllNodesHave(model.FeatureStorageNotes) }
	var states checkpoint.Store = checkpoint.Etcd{Store: c.store}
	if c.cfg.Checkpoints != nil {
		states = c.cfg.Checkpoints
	}
	manager := dispatcher.NewManager(dispatcher.ManagerConfig{Self: c.cfg.ID, Store: c.store, View: view, Transport: c.tr, Logs: logs, Log: c.log,
		Observe: c.cfg.ObserveSink, Metrics: c.cfg.Recoveries, Sinks: sinks, Checkpoints: states, Faults: c.cfg.Faults})
	// Consumers learn the checkpoint from the sink (seed 004): opened
	// here, on the maintainer's capture, apart from the dispatchers' sinks.
	marks := registry.NewPublisher(registry.Env{Log: c.log, StorageMetrics: sinks.StorageMetrics, KafkaMetrics: sinks.KafkaMetrics,
		Tenure: sinks.Tenure, FileRoot: sinks.FileRoot, SpoolDir: sinks.SpoolDir})
	host := maintainer.NewHost(maintainer.HostConfig{Self: c.cfg.ID, Store: c.store, View: view, Transport: c.tr, Logs: logs, Log: c.log,
		MoveTimeout: c.cfg.MoveTimeout, LogDir: c.cfg.EventLogDir, LogMemory: c.logMemory, Checkpoints: states, SinkHolds: manager.SinkHolds, Checkpointed: marks.Publish, Faults: c.cfg.Faults})
	return &assembled{Incarnation: Incarnation{Member: member, View: view, Runner: runner, Coordinator: coord, Manager: manager, Host: host, Logs: logs},
		elector: elector, marks: marks.Run}, nil
}

func (c *Capture) elector(member *cluster.Member) (election.Elector, error) {
	if c.cfg.Elector != nil {
		return c.cfg.Elector(c.store, member)
	}
	return election.NewEtcd(member.Session(), c.store.Keys(), c.cfg.ID), nil
}

// stopGracefully moves this capture to Stopping and waits for the runner
// to give up the coordinator term, so that another capture takes over at
// once instead of after the lease TTL.
func (c *Capture) stopGracefully(member *cluster.Member, runner *election.Runner) {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := member.Stop(sctx); err != nil {
		c.log.Warn("could not set liveness to Stopping", "err", err)
	} else {
		c.log.Info("liveness is now Stopping")
	}
	for {
		if _, leading := runner.Current(); !leading {
			return
		}
		select {
		case <-sctx.Done():
			c.log.Warn("still coordinator after 10s of shutdown; leaving anyway")
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// followSelf keeps readiness and this capture's own liveness in step with
// the view, and passes on a restart request for this incarnation.
func (c *Capture) followSelf(ctx context.Context, view *cluster.View, incarnation int64, restart chan<- model.RestartRequest) {
	select {
	case <-view.Loaded():
	case <-ctx.Done():
		return
	}
	for {
		ch := view.Changed()
		st := view.State()
		_, registered := st.Nodes[c.cfg.ID]
		if registered {
			c.ownLiveness.Store(int32(st.LivenessOf(c.cfg.ID)))
		}
		_, hasLeader := st.Leader()
		if ctx.Err() == nil {
			c.ready.Store(registered && hasLeader)
		}
		if r, ok := st.Restarts[c.cfg.ID]; ok && r.Request.Incarnation == incarnation && !r.Request.ByHook {
			select {
			case restart <- r.Request:
			default: // passed on already
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
