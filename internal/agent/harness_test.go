package agent

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/certs"
	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// sessionTTL is every agent test's session TTL, the agent's default. A
// test that proves a graceful operation wrote nothing twice must not lose
// a session to a CPU stall: under -race on two busy cores a 2s lease ran
// out (CI saw a drain's target drop out mid-drain), the capture's
// partitions then resume elsewhere from their last checkpoint, and that
// correct at-least-once replay, or the lost target, fails the test. A
// test that crashes a capture does not wait for this TTL: crash revokes
// the dead capture's lease, as if it had just run out.
const sessionTTL = 10 * time.Second

// testTTL is the TTL of the bare memberships the election tests join
// (not agents): short, so that their expiry is quick to wait for.
const testTTL = 2 * time.Second

// testCluster is real etcd in process plus agents that talk to it over
// loopback, exactly as separate processes would.
type testCluster struct {
	t        *testing.T
	log      *slog.Logger
	tail     *enginetest.LogTail // what the agents logged (empty with CDCCTL_TEST_LOG)
	endpoint string
	cli      *clientv3.Client
	store    *meta.Store
	nodes    map[model.NodeID]*runningNode
	// hub connects the nodes in memory; nil makes them talk gRPC over
	// loopback, as separate processes do.
	hub *transport.Hub
	// ttl is the agents' session TTL.
	ttl time.Duration
	// tokenFile, if set, is the agents' --token-auth-file.
	tokenFile string
	// tls, if set, gives each agent its --tls-* files.
	tls func(id string) certs.Files
	// moveTimeout, if set, is the agents' --move-timeout.
	moveTimeout time.Duration
	// viewCatchUp, if set, is how long the agents' API reads wait for
	// their views (WithViewCatchUp).
	viewCatchUp time.Duration
	// retentionEvery, if set, is how often the agents read the upstream
	// logs' retention (WithRetentionEvery).
	retentionEvery time.Duration
	// checkpointStore, if set, is the agents' --checkpoint-store.
	checkpointStore string
	// electionDSN, if set, elects through MySQL (--election-dsn), with
	// electionTTL as the lock's TTL.
	electionDSN string
	electionTTL time.Duration
	// faults are fault-injection hooks, by node.
	faults map[model.NodeID]Faults
	// sinkRoot, if set, is the agents' --sink-root (else the system's
	// temporary directory, which holds every test's own).
	sinkRoot string
}

type runningNode struct {
	node   *Node
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// TestMain runs 2 of the tests that call t.Parallel at once, unless
// -parallel says otherwise (go test's default is one per core, which is
// also 2 on the CI machines; it is set here so that it does not grow on
// a bigger one). A cluster test mostly waits (on sessions, moves, a
// source's rate): alone, this package ran 2 at once in 591 s using under
// one of the two cores. Beside the other packages, 3 at once was hardly
// faster (757 s) and starved a MariaDB the election test needed.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", "2"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	endpoint, cli := etcdtest.Start(t)
	log, tail := enginetest.Logger(t)
	tc := &testCluster{t: t, log: log, tail: tail, endpoint: endpoint, cli: cli, store: meta.NewStore(cli, "test"), nodes: map[model.NodeID]*runningNode{}, hub: transport.NewHub(), ttl: sessionTTL}
	t.Cleanup(tc.stopAll)
	return tc
}

// start runs one agent and waits until it listens.
func (tc *testCluster) start(id string) *runningNode {
	tc.t.Helper()
	var tlsFiles certs.Files
	if tc.tls != nil {
		tlsFiles = tc.tls(id)
	}
	opts := append(tc.options(), WithFaults(tc.faults[model.NodeID(id)]))
	n, err := New(Config{
		NodeID: id, Addr: "127.0.0.1:0", Etcd: []string{tc.endpoint}, ClusterID: "test",
		// The tests' file sinks are their own temporary directories.
		DataDir: tc.t.TempDir(), SinkRoot: cmp.Or(tc.sinkRoot, os.TempDir()), SessionTTL: tc.ttl, ElectionDSN: tc.electionDSN, ElectionTTL: tc.electionTTL, MoveTimeout: tc.moveTimeout, CheckpointStore: tc.checkpointStore, TokenAuthFile: tc.tokenFile, Pprof: true,
		TLSCertFile: tlsFiles.Cert, TLSKeyFile: tlsFiles.Key, TLSCAFile: tlsFiles.CA, LogLevel: "info", LogFormat: "text",
	}, tc.log, opts...)
	if err != nil {
		tc.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runningNode{node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- n.Run(ctx) }()
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	if rn.addr, err = n.Addr(actx); err != nil {
		tc.t.Fatalf("%s did not start listening: %v", id, err)
	}
	tc.nodes[model.NodeID(id)] = rn
	return rn
}

func (tc *testCluster) options() []Option {
	var opts []Option
	if tc.hub != nil {
		opts = append(opts, WithHub(tc.hub))
	}
	if tc.viewCatchUp > 0 {
		opts = append(opts, WithViewCatchUp(tc.viewCatchUp))
	}
	if tc.retentionEvery > 0 {
		opts = append(opts, WithRetentionEvery(tc.retentionEvery))
	}
	return opts
}

// startCaptures starts capture-1..capture-n and waits for a coordinator.
func (tc *testCluster) startCaptures(n int) meta.Leader {
	tc.t.Helper()
	for i := 1; i <= n; i++ {
		tc.start(fmt.Sprintf("capture-%d", i))
	}
	return tc.waitLeader()
}

// stop stops one agent gracefully and returns what Run returned.
func (tc *testCluster) stop(id model.NodeID) error {
	rn := tc.nodes[id]
	delete(tc.nodes, id)
	rn.cancel()
	select {
	case err := <-rn.done:
		return err
	// The agent's own bounds add up to about 30 s on a loaded machine:
	// 10 s to give up the coordinator term, 10 s for the final positions'
	// handover, 5 s for the API's shutdown, and the sinks' last writes.
	case <-time.After(60 * time.Second):
		tc.t.Fatalf("%s did not stop within 60s", id)
		return nil
	}
}

// crash kills one agent as kill -9 would, as far as the cluster can tell,
// and then expires its lease at once: what the cluster sees is the TTL
// running out just after the death, without a test waiting for it or
// running every agent on a TTL short enough to lose under load. (The
// runbooks kill real processes and wait for the real TTL.)
func (tc *testCluster) crash(id model.NodeID) {
	tc.t.Helper()
	tc.kill(id)
	if e, ok := tc.state().Nodes[id]; ok {
		// Revoking takes its registration, and all it held under that lease, with it.
		if _, err := tc.cli.Revoke(context.Background(), clientv3.LeaseID(e.Info.Incarnation)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			tc.t.Fatalf("expiring the lease of the crashed %s: %v", id, err)
		}
	}
}

// kill kills one agent as kill -9 would and leaves its lease to run out
// by itself: meanwhile the cluster still sees it registered (and leading,
// if it led), but nothing answers at its address.
func (tc *testCluster) kill(id model.NodeID) {
	tc.t.Helper()
	rn := tc.nodes[id]
	delete(tc.nodes, id)
	rn.node.crash()
	rn.cancel()
	select {
	case <-rn.done:
	case <-time.After(30 * time.Second):
		tc.t.Fatalf("%s did not go down within 30s", id)
	}
}

func (tc *testCluster) stopAll() {
	for id := range tc.nodes {
		_ = tc.stop(id)
	}
}

// client talks to every running agent, like an operator with --server.
// client is the tests' API client. Its timeout is cdcctl's default: a
// write on a loaded machine can take more than 10 s.
func (tc *testCluster) client() *api.Client { return tc.clientWithTimeout(30 * time.Second) }

func (tc *testCluster) clientWithTimeout(d time.Duration) *api.Client {
	var addrs []string
	for _, rn := range tc.nodes {
		addrs = append(addrs, rn.addr)
	}
	c, err := api.NewClient(addrs, d)
	if err != nil {
		tc.t.Fatal(err)
	}
	return c
}

// eventually polls cond until it holds or the deadline passes.
func (tc *testCluster) eventually(what string, timeout time.Duration, cond func() bool) {
	tc.t.Helper()
	tc.eventuallyEvery(what, timeout, 20*time.Millisecond, cond)
}

// eventuallyEvery polls at a given pace: reading 20,000 partitions every
// 20ms would load the cluster it measures.
func (tc *testCluster) eventuallyEvery(what string, timeout, every time.Duration, cond func() bool) {
	tc.t.Helper()
	enginetest.Eventually(tc.t, what, timeout, every, cond)
}

// state reads what etcd holds right now.
func (tc *testCluster) state() *meta.State {
	tc.t.Helper()
	st, err := tc.store.Load(context.Background())
	if err != nil {
		tc.t.Fatal(err)
	}
	return st
}

// leader is the coordinator according to etcd.
func (tc *testCluster) leader() (meta.Leader, bool) { return tc.state().Leader() }

// waitLeader waits for a coordinator among the running nodes, every one of
// them ready.
func (tc *testCluster) waitLeader() meta.Leader {
	tc.t.Helper()
	var l meta.Leader
	// Generous: on a starved machine (CI runs every package at once on
	// two cores) registering in etcd has taken over 15 s.
	tc.eventually("a coordinator and every node ready", time.Minute, func() bool {
		var ok bool
		l, ok = tc.leader()
		if !ok || tc.nodes[l.Node] == nil {
			return false
		}
		for _, rn := range tc.nodes {
			if !rn.node.Ready() {
				return false
			}
		}
		return true
	})
	return l
}

// electionHolders lists the nodes that have a key under the election
// prefix: every node that is campaigning or leading.
func (tc *testCluster) electionHolders() map[model.NodeID]bool {
	tc.t.Helper()
	return enginetest.ElectionHolders(tc.t, tc.store)
}

// get returns the body of an HTTP GET on an agent.
func (tc *testCluster) get(addr, path string) string {
	tc.t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		tc.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
