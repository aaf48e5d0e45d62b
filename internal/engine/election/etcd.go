package election

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Etcd is the default backend: etcd's election recipe on the node's session
// lease. The term's fence is the node's election key, which lives exactly
// as long as the term.
type Etcd struct {
	self     model.NodeID
	session  *concurrency.Session
	election *concurrency.Election
	key      string // this node's candidacy key

	mu        sync.Mutex
	stopWatch context.CancelFunc
	watchers  sync.WaitGroup
}

// NewEtcd returns an elector for self on the given session.
func NewEtcd(session *concurrency.Session, keys meta.Keys, self model.NodeID) *Etcd {
	return &Etcd{
		self: self, session: session,
		election: concurrency.NewElection(session, keys.ElectionPrefix()),
		// The key etcd's recipe campaigns with: NewElection puts a "/"
		// after the prefix it is given, then the lease in hex. Without
		// that "/" (until 2026-12-02) Withdraw deleted nothing, and a
		// campaign given up while its key was being written left a
		// candidacy that stood in the queue until the session ended
		// (TestUnreadableLivenessIsNeverSchedulable failed so once).
		key: fmt.Sprintf("%s/%x", keys.ElectionPrefix(), session.Lease()),
	}
}

// Campaign implements Elector.
func (e *Etcd) Campaign(ctx context.Context) (Term, error) {
	if err := e.election.Campaign(ctx, string(e.self)); err != nil {
		// etcd's recipe leaves the key behind on some failures; a stale
		// candidacy would stand in front of every other node.
		_ = e.Withdraw(context.Background())
		return Term{}, err
	}
	fence := meta.Fence{Key: e.election.Key(), CreateRevision: e.election.Rev()}
	done := make(chan struct{})
	wctx, cancel := context.WithCancel(e.session.Ctx())
	e.mu.Lock()
	e.stopWatch = cancel
	e.mu.Unlock()
	e.watchers.Add(1)
	go func() {
		defer e.watchers.Done()
		defer close(done)
		e.watchTerm(wctx, fence)
	}()
	return Term{Leader: e.self, Fence: fence, Done: done}, nil
}

// watchTerm returns when the election key is deleted or replaced, when the
// session ends, or when ctx is cancelled. A broken watch or a failed read
// is retried: only etcd saying the key is gone ends the term.
func (e *Etcd) watchTerm(ctx context.Context, fence meta.Fence) {
	cli := e.session.Client()
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, fence.Key)
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != fence.CreateRevision {
				return
			}
			if e.followKey(ctx, fence, resp.Header.Revision+1) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-e.session.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// followKey watches the key; true means the term is over.
func (e *Etcd) followKey(ctx context.Context, fence meta.Fence, from int64) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := e.session.Client().Watch(wctx, fence.Key, clientv3.WithRev(from))
	for {
		select {
		case <-e.session.Done():
			return true
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return false
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != fence.CreateRevision {
					return true
				}
			}
		}
	}
}

// Resign implements Elector.
func (e *Etcd) Resign(ctx context.Context) error {
	e.mu.Lock()
	stop := e.stopWatch
	e.stopWatch = nil
	e.mu.Unlock()
	if stop == nil {
		return ErrNotLeader
	}
	err := e.election.Resign(ctx)
	stop()
	e.watchers.Wait()
	return err
}

// Withdraw implements Elector: it deletes this node's candidacy key if it
// is still this session's.
func (e *Etcd) Withdraw(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := e.session.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(e.key), "=", e.session.Lease())).
		Then(clientv3.OpDelete(e.key)).Commit()
	return err
}
