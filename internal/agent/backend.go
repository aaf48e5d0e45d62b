package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/version"
)

// handler serves the API, health and metrics.
func (n *Node) handler() http.Handler {
	mux := http.NewServeMux()
	var opts []api.HandlerOption
	if n.clientTLS != nil {
		opts = append(opts, api.ForwardOverTLS(n.clientTLS))
	}
	mux.Handle("/api/", api.NewHandler(backend{n}, n.cfg.NodeID, n.log, opts...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		serving, l := n.Serving()
		if !serving && l != model.LivenessUnknown {
			api.WriteError(w, api.Errorf(api.CodeUnavailable, "it takes no new work until its agent restarts; its partitions move (or moved) to other captures",
				"not ready: capture %s is %s", n.ID(), l))
			return
		}
		if !serving {
			api.WriteError(w, api.Errorf(api.CodeUnavailable, "wait; the agent is joining the cluster or no coordinator is elected yet", "not ready"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": true})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	if n.cfg.Pprof {
		// Index serves the named profiles (heap, goroutine, ...) too.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	// Before the mux, which would redirect an unclean path with a bare 301.
	clean := api.CanonicalPaths(api.RecordRoute(mux))
	if n.tokens != nil {
		clean = api.Authenticate(n.tokens, n.cfg.MetricsNeedToken, clean)
	}
	clean = n.metrics.http.observe(api.HeaderLimit(clean))
	if n.grpc == nil {
		return clean
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if transport.IsGRPC(r) {
			n.grpc.ServeHTTP(w, r)
			return
		}
		clean.ServeHTTP(w, r)
	})
}

// serve serves the handler on ln until the returned stop is called;
// stop shuts the server down (5 s for requests under way) and returns
// why serving ended, if not by stop.
//
// One port: the API over HTTP/1, and the node-to-node transport over
// HTTP/2 (gRPC) beside it; both over TLS with --tls-*, else both in the
// clear (HTTP/2 without TLS).
func (n *Node) serve(ln net.Listener) (stop func() error) {
	srv := &http.Server{Handler: n.handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: api.ServerMaxHeaderBytes, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	served := make(chan error, 1)
	if n.serverTLS != nil {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = n.serverTLS
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
		go func() { served <- srv.Serve(ln) }()
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// backend adapts the node to api.Backend.
type backend struct{ n *Node }

var errNotJoined = api.Errorf(api.CodeUnavailable, "the agent is starting or rejoining; try again in a moment", "this capture is not a member of the cluster right now")

// load is the cluster's state for a read: the watched view, once it has
// caught up with etcd's current revision (one key's count), so a reader
// sees every write acknowledged before it asked. A full read of the
// prefix per request cost a live view at 20,000 partitions about 8 full
// reads a second. A view that does not catch up in time (a broken watch
// being replaced) is bypassed by a full read.
func (b backend) load(ctx context.Context) (*meta.State, error) {
	store, inc := b.n.current()
	if store == nil || inc == nil {
		return nil, errNotJoined
	}
	unavailable := func(err error) error {
		return api.Errorf(api.CodeUnavailable, "check that etcd is reachable from this agent", "%v", err)
	}
	rev, err := store.Revision(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	if st := inc.View.State(); st.Revision >= rev {
		return st, nil
	}
	// A progress request tells the watch etcd's revision when nothing
	// under this cluster's prefix moves it. etcd answers one only while
	// the watch is synced, so one sent a moment early goes unanswered:
	// ask again every 250 ms while waiting.
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(b.n.viewCatchUp, viewCatchUp))
	defer cancel()
	for {
		_ = store.RequestProgress(wctx)
		rctx, rcancel := context.WithTimeout(wctx, 250*time.Millisecond)
		err = inc.View.WaitRevision(rctx, rev)
		rcancel()
		if err == nil {
			return inc.View.State(), nil
		}
		if wctx.Err() != nil {
			break
		}
	}
	b.n.metrics.fullReads.Inc()
	st, err := store.Load(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	return st, nil
}

// viewCatchUp is how long a read waits for the view before it reads etcd
// in full.
const viewCatchUp = 2 * time.Second

func (b backend) Status(ctx context.Context) (*api.Status, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	out := &api.Status{
		Version: api.SchemaVersion, ClusterID: b.n.cfg.ClusterID, Captures: len(st.Nodes),
		ServedBy: b.n.cfg.NodeID, ServerVersion: version.Version, Revision: st.Revision,
		Election: b.n.cfg.Election, ElectionEpoch: st.TermEpoch,
	}
	if l, ok := st.Leader(); ok {
		out.Coordinator = string(l.Node)
		out.CoordinatorEpoch = l.Fence.Epoch()
		if n, ok := st.Nodes[l.Node]; ok {
			out.CoordinatorAddress = n.Info.Address
		}
	}
	for id := range st.Nodes {
		switch st.LivenessOf(id) {
		case model.LivenessAlive:
			out.Alive++
		case model.LivenessDraining:
			out.Draining++
		case model.LivenessStopping:
			out.Stopping++
		}
	}
	return out, nil
}

func captureOf(ns model.NodeState) api.Capture {
	return api.Capture{
		ID: string(ns.Info.ID), Address: ns.Info.Address, Liveness: ns.Liveness.String(), Coordinator: ns.Coordinator,
		PID: ns.Info.PID, StartedAt: ns.Info.StartedAt, AgentVersion: ns.Info.Version, Features: ns.Info.Features,
	}
}

func (b backend) Captures(ctx context.Context) (*api.CaptureList, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	out := &api.CaptureList{Version: api.SchemaVersion, Captures: []api.Capture{}}
	for _, ns := range st.NodeStates() {
		out.Captures = append(out.Captures, captureOf(ns))
	}
	return out, nil
}

func (b backend) Capture(ctx context.Context, id string) (*api.CaptureResponse, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	snap := model.Snapshot{Nodes: st.NodeStates()}
	ns, ok := snap.Node(model.NodeID(id))
	if !ok {
		known := make([]string, 0, len(snap.Nodes))
		for _, n := range snap.Nodes {
			known = append(known, string(n.Info.ID))
		}
		return nil, api.Errorf(api.CodeNotFound, "known captures: "+strings.Join(known, ", ")+" ('cdcctl capture list')", "capture %q not found", id)
	}
	return &api.CaptureResponse{Version: api.SchemaVersion, Capture: captureOf(ns)}, nil
}

func (b backend) Snapshot(ctx context.Context) (*api.SnapshotResponse, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	return &api.SnapshotResponse{Version: api.SchemaVersion, Snapshot: coordinator.Snapshot(st)}, nil
}

// Coordinator waits up to wait for a coordinator to be known, woken by
// each change of this node's view (a node not joined yet has no view:
// it looks again every 50 ms).
func (b backend) Coordinator(ctx context.Context, wait time.Duration) (self bool, addr string, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// The channel first: a change after the look wakes the wait.
		var changed <-chan struct{}
		var again <-chan time.Time
		if _, inc := b.n.current(); inc != nil {
			changed = inc.View.Changed()
		} else {
			again = time.After(50 * time.Millisecond)
		}
		if self, addr, ok = b.coordinator(); ok {
			return self, addr, ok
		}
		select {
		case <-changed:
		case <-again:
		case <-ctx.Done():
			return b.coordinator()
		}
	}
}

func (b backend) coordinator() (self bool, addr string, ok bool) {
	_, inc := b.n.current()
	if inc == nil {
		return false, "", false
	}
	if _, leading := inc.Runner.Current(); leading {
		return true, b.n.addr, true
	}
	st := inc.View.State()
	l, found := st.Leader()
	if !found {
		return false, "", false
	}
	node, registered := st.Nodes[l.Node]
	if !registered || l.Node == b.n.ID() {
		// Either the leader is leaving, or this node's view still shows the
		// term it just gave up: not known yet.
		return false, "", false
	}
	return false, node.Info.Address, true
}

// ResignCoordinator hands the role to another capture and waits until one
// has it. It refuses when nobody could take over, rather than resigning
// into an election only this node can win.
func (b backend) ResignCoordinator(ctx context.Context, req api.ResignRequest) (*api.ResignResponse, error) {
	wait := 15 * time.Second
	if req.Wait != "" {
		d, err := time.ParseDuration(req.Wait)
		if err != nil || d <= 0 {
			return nil, api.Errorf(api.CodeBadRequest, `use a positive Go duration such as "10s"`, "wait %q is not a duration", req.Wait)
		}
		wait = d
	}
	_, inc := b.n.current()
	if inc == nil {
		return nil, errNotJoined
	}
	term, leading := inc.Runner.Current()
	if !leading {
		return nil, api.Errorf(api.CodeUnavailable, "try again; the request will be forwarded to the new coordinator", "%s stopped being the coordinator while the request was in flight", b.n.cfg.NodeID)
	}
	// Decide on a fresh read, not the view: a peer that just became
	// Draining must not count as a candidate.
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	var others []string
	for _, id := range st.NodeIDs() {
		if id != b.n.ID() && st.LivenessOf(id).MayCampaign() {
			others = append(others, string(id))
		}
	}
	if len(others) == 0 {
		return nil, api.Errorf(api.CodeConflict, "start another capture (or wait for a Draining one to finish) and try again",
			"no other capture can become the coordinator: every other capture is missing, Draining or Stopping")
	}
	if err := inc.Runner.Resign(ctx); err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "try again", "resign failed: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var next meta.Leader
	err = inc.View.WaitFor(wctx, func(st *meta.State) bool {
		l, ok := st.Leader()
		if ok && l.Fence.Epoch() > term.Epoch() {
			next = l
			return true
		}
		return false
	})
	if err == nil && next.Node == b.n.ID() {
		return nil, api.Errorf(api.CodeConflict, "check that the other captures are Alive ('cdcctl capture list') and try again",
			"resigned, but no other capture was campaigning, so %s won the election again (epoch %d)", b.n.cfg.NodeID, next.Fence.Epoch())
	}
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "check 'cdcctl cluster status'; this capture campaigns again and may have won back",
			"resigned, but no other capture took over within %s", wait)
	}
	return &api.ResignResponse{
		Version: api.SchemaVersion, Previous: b.n.cfg.NodeID, PreviousEpoch: term.Epoch(),
		Coordinator: string(next.Node), CoordinatorEpoch: next.Fence.Epoch(),
	}, nil
}
