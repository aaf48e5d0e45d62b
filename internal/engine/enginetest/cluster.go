// Package enginetest is an in-process cluster any package's tests can
// start: a real etcd (embedded, on loopback), captures assembled as the
// agent assembles them (package capture) talking through the in-memory
// transport, and the operations an operator runs (create a changefeed,
// submit a plan, pause, verify) called on the elected coordinator
// directly. It has no API server, no gRPC, no metrics: a test of the
// engine's decisions pays only for the engine.
//
// The agent's own tests (internal/agent) prove what is about assembling
// a node and serving its API; the engine's scenarios live beside the
// code they prove (coordinator, maintainer, dispatcher), on this harness.
package enginetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// SessionTTL is every capture's session TTL, the agent's default. A test
// that proves a graceful operation wrote nothing twice must not lose a
// session to a CPU stall: under -race on two busy cores a 2 s lease ran
// out (CI saw a drain's target drop out mid-drain). A test that crashes a
// capture does not wait for this TTL: Crash revokes the dead capture's
// lease, as if it had just run out.
const SessionTTL = 10 * time.Second

// Options shape a cluster; the zero value is the usual one.
type Options struct {
	// TTL is the captures' session TTL (zero: SessionTTL).
	TTL time.Duration
	// MoveTimeout is the captures' --move-timeout (zero: the default).
	MoveTimeout time.Duration
	// Faults are fault-injection hooks, by capture.
	Faults map[model.NodeID]capture.Faults
	// Checkpoints is where partition states go (nil: etcd), as
	// --checkpoint-store.
	Checkpoints checkpoint.Store
	// EtcdLinks carries each capture's etcd traffic through a link the
	// test can freeze (Link).
	EtcdLinks bool
	// Audit, if set, sees every capture's etcd requests.
	Audit *WriteAudit
	// Interceptor, if set, is each capture's etcd client's interceptor
	// (after Audit's): a test acts between a capture's read and its write.
	Interceptor func(model.NodeID) grpc.UnaryClientInterceptor
	// FeedRate is the changes a second of each changefeed Feeds creates
	// (zero: FeedRate).
	FeedRate int
	// FollowTablesEvery is the captures' --follow-tables-every (zero:
	// the default).
	FollowTablesEvery time.Duration
	// LogMemory is the bytes each capture's event logs share for their
	// newest rows (--log-memory-mib; zero: testLogMemory).
	LogMemory int64
}

// testLogMemory is the tests' room for the event logs' newest rows: a
// small one, so that a workload's older rows are read back from the
// logs' files and its newest from memory, both ways as in a node. The
// benchmarks give the agent's (eventlog.DefaultMemory).
const testLogMemory = 4 << 20

// FeedRate is Feeds' load per changefeed in tests: 50 changes a second,
// about 12 a second into each of its four partitions, so that every
// move of a drain meets rows in flight. Not more: the tests that
// create a dozen of them wait on the cluster far more than they
// compute, yet a dozen feeds at 200 a second made their rows most of
// the CPU they used under -race (three drain scenarios alone: 25 s of
// CPU at 200, 11 s at 20), and the whole run shares two cores. The
// benchmarks that measure lag under a load set their own.
const FeedRate = 50

// Cluster is etcd and the captures of one test.
type Cluster struct {
	T testing.TB
	// Log is what every capture logs to; Tail keeps it for a failure.
	Log  *slog.Logger
	Tail *LogTail
	// Endpoint and Client reach the cluster's etcd; Store reads it as
	// the engine does.
	Endpoint string
	Client   *clientv3.Client
	Store    *meta.Store
	Hub      *transport.Hub
	Opts     Options
	captures map[model.NodeID]*running
	links    map[model.NodeID]*EtcdLink
}

type running struct {
	capture    *capture.Capture
	recoveries *recoveries
	cli        *clientv3.Client
	tr         transport.Transport
	cancel     context.CancelFunc
	done       chan error
	restarts   atomic.Int64
}

// ClusterID is the cluster id every harness cluster uses in etcd.
const ClusterID = "test"

// New starts etcd; captures are started with Start or StartCaptures.
// Everything stops when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	endpoint, cli := etcdtest.Start(t)
	log, tail := Logger(t)
	if opts.FeedRate == 0 {
		opts.FeedRate = FeedRate
	}
	if opts.TTL == 0 {
		opts.TTL = SessionTTL
	}
	c := &Cluster{T: t, Log: log, Tail: tail, Endpoint: endpoint, Client: cli, Store: meta.NewStore(cli, ClusterID),
		Hub: transport.NewHub(), Opts: opts, captures: map[model.NodeID]*running{}, links: map[model.NodeID]*EtcdLink{}}
	t.Cleanup(func() {
		c.StopAll()
		for _, l := range c.links {
			l.Close()
		}
	})
	return c
}

// Start runs one capture. Each has its own etcd client, as a process
// does, so that a crash closes only its own.
func (c *Cluster) Start(id string) {
	c.T.Helper()
	nid := model.NodeID(id)
	cfg := clientv3.Config{Endpoints: []string{c.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if c.Opts.EtcdLinks {
		l, ok := c.links[nid]
		if !ok { // a capture started again keeps its link
			l = NewEtcdLink(c.T, c.Endpoint)
			c.links[nid] = l
		}
		cfg.Endpoints = []string{l.Endpoint()}
	}
	var chain []grpc.UnaryClientInterceptor
	if c.Opts.Audit != nil {
		chain = append(chain, c.Opts.Audit.Interceptor(nid))
	}
	if c.Opts.Interceptor != nil {
		chain = append(chain, c.Opts.Interceptor(nid))
	}
	if len(chain) > 0 {
		cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(chain...)}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		c.T.Fatal(err)
	}
	tr := c.Hub.Join(nid)
	dir := c.T.TempDir()
	rec := newRecoveries()
	cp := capture.New(capture.Config{
		ID: nid, Address: "engine-test/" + id, Version: "test", SessionTTL: c.Opts.TTL, MoveTimeout: c.Opts.MoveTimeout,
		// The tests' file sinks are their own temporary directories.
		SinkRoot: os.TempDir(), SpoolDir: dir + "/spool", EventLogDir: dir + "/eventlog", Faults: c.Opts.Faults[nid], Checkpoints: c.Opts.Checkpoints,
		Recoveries: rec, FollowTablesEvery: c.Opts.FollowTablesEvery,
		LogMemory: cmp.Or(c.Opts.LogMemory, testLogMemory),
	}, meta.NewStore(cli, ClusterID), tr, c.Log.With("node", id))
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{capture: cp, recoveries: rec, cli: cli, tr: tr, cancel: cancel, done: make(chan error, 1)}
	go func() {
		for {
			err := cp.Run(ctx)
			if errors.Is(err, capture.ErrRestartRequested) && ctx.Err() == nil {
				// The harness is the service manager: a capture asked to
				// restart (a rollout) runs again, as a new incarnation.
				r.restarts.Add(1)
				continue
			}
			r.done <- err
			return
		}
	}()
	c.captures[nid] = r
}

// Restarts counts the times a capture restarted because a rollout asked
// it to.
func (c *Cluster) Restarts(id model.NodeID) int {
	if r, ok := c.captures[id]; ok {
		return int(r.restarts.Load())
	}
	return 0
}

// StartCaptures starts capture-1..capture-n and waits for a coordinator.
func (c *Cluster) StartCaptures(n int) meta.Leader {
	c.T.Helper()
	for i := 1; i <= n; i++ {
		c.Start(fmt.Sprintf("capture-%d", i))
	}
	return c.WaitLeader()
}

// IDs are the running captures, sorted.
func (c *Cluster) IDs() []model.NodeID {
	var out []model.NodeID
	for id := range c.captures {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Link is a capture's link to etcd (Options.EtcdLinks).
func (c *Cluster) Link(id model.NodeID) *EtcdLink {
	c.T.Helper()
	l, ok := c.links[id]
	if !ok {
		c.T.Fatalf("%s has no etcd link: set Options.EtcdLinks", id)
	}
	return l
}

// Capture is a running capture (nil if it is not running).
func (c *Cluster) Capture(id model.NodeID) *capture.Capture {
	if r, ok := c.captures[id]; ok {
		return r.capture
	}
	return nil
}

// Stop stops one capture gracefully and returns what Run returned.
func (c *Cluster) Stop(id model.NodeID) error {
	c.T.Helper()
	r := c.captures[id]
	delete(c.captures, id)
	r.cancel()
	return c.stopped(id, r)
}

// stopped waits for a capture told to stop and closes its connections.
func (c *Cluster) stopped(id model.NodeID, r *running) error {
	c.T.Helper()
	defer r.tr.Close()
	defer r.cli.Close()
	select {
	case err := <-r.done:
		return err
	// The capture's own bounds add up to about 60 s at worst: 10 s to
	// give up the coordinator term, up to 30 s for a dispatcher's stop
	// (its sink's last writes), 10 s for the final positions' handover,
	// 10 s for its maintainers to hear those of other captures.
	case <-time.After(90 * time.Second):
		c.T.Fatalf("%s did not stop within 90s", id)
		return nil
	}
}

// Crash kills one capture as kill -9 would, as far as the cluster can
// tell, and then expires its lease at once: what the cluster sees is the
// TTL running out just after the death, without a test waiting for it.
// (The runbooks kill real processes and wait for the real TTL.)
func (c *Cluster) Crash(id model.NodeID) {
	c.T.Helper()
	c.Kill(id)
	if e, ok := c.State().Nodes[id]; ok {
		// Revoking takes its registration, and all it held under that
		// lease, with it.
		if _, err := c.Client.Revoke(context.Background(), clientv3.LeaseID(e.Info.Incarnation)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			c.T.Fatalf("expiring the lease of the crashed %s: %v", id, err)
		}
	}
}

// Kill kills one capture as kill -9 would and leaves its lease to run
// out by itself: meanwhile the cluster still sees it registered (and
// leading, if it led), but nothing answers for it.
func (c *Cluster) Kill(id model.NodeID) {
	c.T.Helper()
	r := c.captures[id]
	delete(c.captures, id)
	r.capture.Crash()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		c.T.Fatalf("%s did not go down within 30s", id)
	}
}

// StopAll stops every running capture gracefully (also done when the
// test ends).
func (c *Cluster) StopAll() {
	for id := range c.captures {
		_ = c.Stop(id)
	}
}

// maxPoll is the longest pause between two polls of Eventually (unless
// its caller's pace is longer): what a wait may add to a test.
const maxPoll = 200 * time.Millisecond

// Eventually polls cond until it holds or the deadline passes.
func (c *Cluster) Eventually(what string, timeout time.Duration, cond func() bool) {
	c.T.Helper()
	c.EventuallyEvery(what, timeout, 20*time.Millisecond, cond)
}

// EventuallyEvery polls at a given pace: reading 20,000 partitions every
// 20 ms would load the cluster it measures.
func (c *Cluster) EventuallyEvery(what string, timeout, every time.Duration, cond func() bool) {
	c.T.Helper()
	Eventually(c.T, what, timeout, every, cond)
}

// Eventually polls cond until it holds, and fails t if it does not
// within timeout. It polls every `every` at first, then half as often
// again each time up to maxPoll (or every, if longer): most conditions
// read the whole of etcd's state and decode it, and a wait of seconds at
// 20 ms was a tenth of an engine package's CPU under -race, taken from
// the cluster it waits on. A wait of seconds is logged: where a slow
// test spends its time shows in its -v output.
func Eventually(t testing.TB, what string, timeout, every time.Duration, cond func() bool) {
	t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	pause, most := every, max(every, maxPoll)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(pause*3/2, most)
	}
	if waited := time.Since(began); waited > 2*time.Second {
		t.Logf("waited %s for: %s", waited.Round(100*time.Millisecond), what)
	}
}

// State reads what etcd holds right now.
func (c *Cluster) State() *meta.State {
	c.T.Helper()
	st, err := c.Store.Load(context.Background())
	if err != nil {
		c.T.Fatal(err)
	}
	return st
}

// Leader is the coordinator according to etcd.
func (c *Cluster) Leader() (meta.Leader, bool) { return c.State().Leader() }

// WaitLeader waits for a coordinator among the running captures, every
// one of them ready.
func (c *Cluster) WaitLeader() meta.Leader {
	c.T.Helper()
	var l meta.Leader
	// Generous: on a starved machine (CI runs every package at once on
	// two cores) registering in etcd has taken over 15 s.
	c.Eventually("a coordinator and every capture ready", time.Minute, func() bool {
		var ok bool
		l, ok = c.Leader()
		if !ok || c.captures[l.Node] == nil {
			return false
		}
		for _, r := range c.captures {
			if !r.capture.Ready() {
				return false
			}
		}
		return true
	})
	return l
}

// FollowerOf is a running capture other than leader.
func (c *Cluster) FollowerOf(leader model.NodeID) model.NodeID {
	c.T.Helper()
	for _, id := range c.IDs() {
		if id != leader {
			return id
		}
	}
	c.T.Fatal("no follower")
	return ""
}

// MaintainersOn counts the changefeeds whose maintainer is on a capture.
func (c *Cluster) MaintainersOn(node model.NodeID) int { return c.State().MaintainersOn(node) }

// SetLiveness writes a liveness change as the coordinator would: fenced
// with the current term.
func (c *Cluster) SetLiveness(id model.NodeID, to model.Liveness) {
	c.T.Helper()
	SetLiveness(c.T, c.Store, id, to)
}

// SetLiveness writes a liveness change into a cluster's etcd as its
// coordinator would: fenced with the current term.
func SetLiveness(t testing.TB, store *meta.Store, id model.NodeID, to model.Liveness) {
	t.Helper()
	st, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, ok := st.Leader()
	if !ok {
		t.Fatal("no leader to write with")
	}
	if _, err := store.SetLiveness(context.Background(), id, to, model.ReasonNormal, l.Fence); err != nil {
		t.Fatalf("set %s %s: %v", id, to, err)
	}
}

// PartitionsOn counts a changefeed's partitions on a capture, and those
// Draining anywhere.
func (c *Cluster) PartitionsOn(cf model.ChangefeedID, node model.NodeID) (on, draining int) {
	for _, r := range c.State().Partitions[cf] {
		if r.Route.Node == node {
			on++
		}
		if r.Route.Status == model.PartitionDraining {
			draining++
		}
	}
	return on, draining
}

// ElectionHolders lists the captures that have a key under the election
// prefix: every capture that is campaigning or leading.
func (c *Cluster) ElectionHolders() map[model.NodeID]bool {
	c.T.Helper()
	return ElectionHolders(c.T, c.Store)
}

// ElectionHolders lists the nodes that have a key under a cluster's
// election prefix in etcd.
func ElectionHolders(t testing.TB, store *meta.Store) map[model.NodeID]bool {
	t.Helper()
	resp, err := store.Client().Get(context.Background(), store.Keys().ElectionPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[model.NodeID]bool{}
	for _, kv := range resp.Kvs {
		out[model.NodeID(kv.Value)] = true
	}
	return out
}

// StopTogether stops captures gracefully at the same moment, as an
// operator's Ctrl-C of the playground does: every one is told before any
// is waited for.
func (c *Cluster) StopTogether(ids ...model.NodeID) { c.T.Helper(); c.StopApart(0, ids...) }

// StopApart stops captures gracefully one gap after another, as a
// fleet's SIGTERMs arrive, and waits for them all.
func (c *Cluster) StopApart(gap time.Duration, ids ...model.NodeID) {
	c.T.Helper()
	var stopping []*running
	for i, id := range ids {
		if i > 0 {
			time.Sleep(gap)
		}
		r := c.captures[id]
		delete(c.captures, id)
		r.cancel()
		stopping = append(stopping, r)
	}
	for i, r := range stopping {
		_ = c.stopped(ids[i], r)
	}
}
