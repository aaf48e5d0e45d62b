package enginetest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

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

// WriteAudit records, from every capture's etcd client, the writes etcd
// accepted under a coordinator's fence, and the plan and drain writes
// that carried none.
type WriteAudit struct {
	electionPrefix string
	guarded        []string // key prefixes only a coordinator writes

	mu       sync.Mutex
	fenced   []fencedWrite
	unfenced []string
}

// Interceptor is one capture's etcd client's view for the audit.
func (a *WriteAudit) Interceptor(node model.NodeID) grpc.UnaryClientInterceptor {
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

func (a *WriteAudit) isGuarded(key string) bool {
	for _, p := range a.guarded {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (a *WriteAudit) note(s string) {
	a.mu.Lock()
	a.unfenced = append(a.unfenced, s)
	a.mu.Unlock()
}

// Check says what went wrong: a write accepted under an older term after
// one under a newer term (two coordinators writing at once), a term
// whose writes came from two captures, or a guarded write without a fence.
func (a *WriteAudit) Check() (terms int, writes int, problems []string) {
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

// NewWriteAudit audits a harness cluster's coordinator writes (pass it
// in Options.Audit): those fenced by a term under its election prefix,
// and the plan and drain records, which only a coordinator writes.
func NewWriteAudit() *WriteAudit {
	keys := meta.NewKeys(ClusterID)
	return &WriteAudit{electionPrefix: keys.ElectionPrefix(), guarded: []string{keys.PlansPrefix(), keys.Drain()}}
}
