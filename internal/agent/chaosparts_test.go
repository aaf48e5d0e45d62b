package agent

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// etcdLink is one agent's TCP path to etcd, through the test: it can be
// frozen, which from the agent's side is what a SIGSTOPped etcd (or a
// link that drops every packet) looks like: connections stay open,
// nothing comes back, new ones connect and hang. Thawed, what was sent
// meanwhile goes through. etcd itself runs on, so leases the agent does
// not renew within their TTL expire, as they would on a real etcd whose
// link to one agent froze.
type etcdLink struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at the thaw
	conns  []net.Conn
}

func newEtcdLink(t *testing.T, target string) *etcdLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &etcdLink{ln: ln, target: strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://"), thawed: make(chan struct{})}
	close(l.thawed)
	go l.accept()
	return l // closed by the cluster's stopAll, after the agents stop
}

// endpoint is what the agent is given as --etcd.
func (l *etcdLink) endpoint() string { return "http://" + l.ln.Addr().String() }

func (l *etcdLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		go l.pipe(in, out)
		go l.pipe(out, in)
	}
}

// pipe copies one direction, holding what it read while the link is
// frozen.
func (l *etcdLink) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			l.mu.Lock()
			thawed := l.thawed
			l.mu.Unlock()
			<-thawed
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed link: the deferred closes end the other side
		}
	}
}

func (l *etcdLink) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.frozen {
		l.frozen, l.thawed = true, make(chan struct{})
	}
}

func (l *etcdLink) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		l.frozen = false
		close(l.thawed)
	}
}

func (l *etcdLink) close() {
	l.thaw()
	l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// fencedWrite is a coordinator write etcd accepted: who sent it, the
// term it was fenced by (its election key and that key's create
// revision), and the revision it landed at.
type fencedWrite struct {
	node     model.NodeID
	fenceKey string
	epoch    int64
	revision int64
	keys     []string
}

// writeAudit records, from every agent's etcd client, the writes etcd
// accepted under a coordinator's fence, and the plan and drain writes
// that carried none.
type writeAudit struct {
	electionPrefix string
	guarded        []string // key prefixes only a coordinator writes

	mu       sync.Mutex
	fenced   []fencedWrite
	unfenced []string
}

// interceptor is the agent's etcd client's view for the audit.
func (a *writeAudit) interceptor(node model.NodeID) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		txn, ok := req.(*etcdserverpb.TxnRequest)
		resp, rok := reply.(*etcdserverpb.TxnResponse)
		if err != nil || !ok || !rok || !resp.Succeeded {
			if put, ok := req.(*etcdserverpb.PutRequest); ok && err == nil && a.isGuarded(string(put.Key)) {
				a.note(fmt.Sprintf("%s put %s without a fence", node, put.Key))
			}
			return err
		}
		// Deletes are left out of the unfenced check: a capture left
		// alone clears its own drain record, guarded by the membership
		// instead (meta.Store's liveness reset).
		var keys, puts []string
		for _, op := range txn.Success {
			if p := op.GetRequestPut(); p != nil {
				keys, puts = append(keys, string(p.Key)), append(puts, string(p.Key))
			}
			if d := op.GetRequestDeleteRange(); d != nil {
				keys = append(keys, string(d.Key))
			}
		}
		if len(keys) == 0 {
			return err
		}
		for _, c := range txn.Compare {
			// A fence compares its key's create revision for equality; an
			// absence check (0) is a campaign, not a term's write.
			if c.Target == etcdserverpb.Compare_CREATE && c.Result == etcdserverpb.Compare_EQUAL && c.GetCreateRevision() > 0 &&
				strings.HasPrefix(string(c.Key), a.electionPrefix) {
				a.mu.Lock()
				a.fenced = append(a.fenced, fencedWrite{node: node, fenceKey: string(c.Key), epoch: c.GetCreateRevision(), revision: resp.Header.Revision, keys: keys})
				a.mu.Unlock()
				return err
			}
		}
		for _, k := range puts {
			if a.isGuarded(k) {
				a.note(fmt.Sprintf("%s wrote %s without a fence (revision %d)", node, k, resp.Header.Revision))
			}
		}
		return err
	}
}

func (a *writeAudit) isGuarded(key string) bool {
	for _, p := range a.guarded {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (a *writeAudit) note(s string) {
	a.mu.Lock()
	a.unfenced = append(a.unfenced, s)
	a.mu.Unlock()
}

// check says what went wrong: a write accepted under an older term after
// one under a newer term (two coordinators writing at once), a term
// whose writes came from two agents, or a guarded write without a fence.
func (a *writeAudit) check() (terms int, writes int, problems []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ws := append([]fencedWrite(nil), a.fenced...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].revision < ws[j].revision })
	by := map[int64]model.NodeID{}
	var last fencedWrite
	for i, w := range ws {
		if n, ok := by[w.epoch]; ok && n != w.node {
			problems = append(problems, fmt.Sprintf("term %d wrote from %s and from %s", w.epoch, n, w.node))
		}
		by[w.epoch] = w.node
		if i > 0 && w.epoch < last.epoch {
			problems = append(problems, fmt.Sprintf("revision %d: %s wrote %v under term %d after %s wrote under term %d at revision %d",
				w.revision, w.node, w.keys, w.epoch, last.node, last.epoch, last.revision))
		}
		if w.epoch >= last.epoch {
			last = w
		}
	}
	problems = append(problems, a.unfenced...)
	return len(by), len(ws), problems
}

// A drained capture whose etcd session lapses (its link to etcd froze
// past the TTL: a long GC pause, a SIGSTOP, a network fault) joins again
// Stopping, as it was, and is given no work: before, it came back Alive,
// and the balancer moved partitions onto the capture its operator had
// taken out of service (found by the chaos suite's isolate-target).
func TestADrainedCaptureWhoseSessionLapsesStaysOutOfService(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	tc.links = map[model.NodeID]*etcdLink{}
	leader := tc.startCaptures(3)
	c := tc.client()
	sinks := tc.createFeeds(c, 2)
	target := tc.followerOf(leader.Node)
	tc.eventually("partitions on the target", 20*time.Second, func() bool { return partitionsOn(tc.state(), target) > 0 })
	res, err := c.Drain(context.Background(), string(target), api.DrainRequest{Batch: 2, SubmittedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if rec := tc.planEnd(c, res.PlanID, time.Minute); rec.State != exec.Done {
		t.Fatalf("the drain ended %s: %s", rec.State, rec.Message)
	}
	before := tc.state().Nodes[target].Info.Incarnation
	tc.links[target].freeze()
	time.Sleep(sessionTTL + 3*time.Second)
	tc.links[target].thaw()
	tc.eventually("the target joins again", 30*time.Second, func() bool {
		n, ok := tc.state().Nodes[target]
		return ok && n.Info.Incarnation != before
	})
	if l := tc.state().LivenessOf(target); l != model.LivenessStopping {
		t.Fatalf("the drained capture joined again %s, want Stopping", l)
	}
	// Long enough for a balancing pass to have moved work onto it.
	time.Sleep(5 * time.Second)
	if on := partitionsOn(tc.state(), target); on > 0 {
		t.Fatalf("the drained capture was given %d partitions after its session lapsed", on)
	}
	tc.verifyAll(c, sinks, true)
}

// partitionsOn counts the partitions routed to a node.
func partitionsOn(st *meta.State, node model.NodeID) int {
	n := 0
	for _, ps := range st.Partitions {
		for _, r := range ps {
			if r.Route.Node == node {
				n++
			}
		}
	}
	return n
}
