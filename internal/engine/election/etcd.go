package election

import (
	"context"
	"sync"

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

	mu         sync.Mutex
	stopWatch  context.CancelFunc
	watchGroup sync.WaitGroup
}

// NewEtcd returns an elector for self on the given session.
func NewEtcd(session *concurrency.Session, keys meta.Keys, self model.NodeID) *Etcd {
	return &Etcd{self: self, session: session, election: concurrency.NewElection(session, keys.ElectionPrefix())}
}

// Campaign implements Elector.
func (e *Etcd) Campaign(ctx context.Context) (Term, error) {
	if err := e.election.Campaign(ctx, string(e.self)); err != nil {
		return Term{}, err
	}
	fence := meta.Fence{Key: e.election.Key(), CreateRevision: e.election.Rev()}
	done := make(chan struct{})
	wctx, cancel := context.WithCancel(e.session.Ctx())
	e.mu.Lock()
	e.stopWatch = cancel
	e.mu.Unlock()
	e.watchGroup.Add(1)
	go func() {
		defer e.watchGroup.Done()
		defer close(done)
		e.watchTerm(wctx, fence)
	}()
	return Term{Leader: e.self, Fence: fence, Done: done}, nil
}

// watchTerm returns when the election key is deleted or replaced, when the
// session ends, or when ctx is cancelled.
func (e *Etcd) watchTerm(ctx context.Context, fence meta.Fence) {
	cli := e.session.Client()
	resp, err := cli.Get(ctx, fence.Key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != fence.CreateRevision {
		return
	}
	wch := cli.Watch(ctx, fence.Key, clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-e.session.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != fence.CreateRevision {
					return
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
	e.watchGroup.Wait()
	return err
}
