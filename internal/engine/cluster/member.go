package cluster

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Member is one incarnation of a node in the cluster: a session lease with
// the node's registration bound to it. When the lease ends, so does the
// membership; a new one is a new incarnation.
type Member struct {
	store   *meta.Store
	session *concurrency.Session
	info    model.NodeInfo
	tenure  *Tenure
	// stopTenure ends the tenure's keepalive stream.
	stopTenure context.CancelFunc
}

// Join opens a session with the given TTL and registers the node under it.
//
// previous is what this same process knows of the incarnation it had
// before it lost its session (zero for a fresh start); see
// meta.Store.RegisterNode.
func Join(ctx context.Context, store *meta.Store, info model.NodeInfo, ttl time.Duration, previous meta.Previous) (*Member, error) {
	secs := int(ttl.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	// The lease is granted under ctx (which may carry a timeout), but its
	// keepalive must outlive ctx: the session runs on its own context and
	// ends with Leave, Abandon or the lease.
	asked := time.Now()
	grant, err := store.Client().Grant(ctx, int64(secs))
	if err != nil {
		return nil, fmt.Errorf("open an etcd session (lease with TTL %ds): %w", secs, err)
	}
	session, err := concurrency.NewSession(store.Client(), concurrency.WithLease(grant.ID), concurrency.WithTTL(secs), concurrency.WithContext(context.Background()))
	if err != nil {
		return nil, fmt.Errorf("keep the etcd session alive: %w", err)
	}
	// The tenure follows the session's renewals through a keepalive
	// stream of its own on the same lease (the client sends one request
	// for both), counted from before the grant was asked for.
	tenure := newTenure(time.Duration(grant.TTL)*time.Second, asked)
	kctx, stopTenure := context.WithCancel(context.Background())
	renewals, err := store.Client().KeepAlive(kctx, grant.ID)
	if err != nil {
		stopTenure()
		session.Close()
		return nil, fmt.Errorf("keep the etcd session alive: %w", err)
	}
	go func() {
		for range renewals {
			// The lease runs from when the renewal was sent; its answer
			// comes later, and the margin covers the round trip.
			tenure.renew(time.Now())
		}
		tenure.end()
	}()
	info.Incarnation = int64(session.Lease())
	if err := store.RegisterNode(ctx, info, session.Lease(), previous); err != nil {
		stopTenure()
		session.Close()
		return nil, err
	}
	return &Member{store: store, session: session, info: info, tenure: tenure, stopTenure: stopTenure}, nil
}

// Tenure is how long this member may still write for the work it was
// given; see Tenure.
func (m *Member) Tenure() *Tenure { return m.tenure }

// Info is what this member registered.
func (m *Member) Info() model.NodeInfo { return m.info }

// Session is the member's lease, for the election backend.
func (m *Member) Session() *concurrency.Session { return m.session }

// Lost is closed when the lease is gone (expired, revoked, or etcd lost).
func (m *Member) Lost() <-chan struct{} { return m.session.Done() }

// Stop moves the node to Stopping (from Alive or Draining), which also makes
// it resign if it is the coordinator.
func (m *Member) Stop(ctx context.Context) error {
	_, err := m.store.SetOwnLiveness(ctx, m.info.ID, m.info.Incarnation, model.LivenessStopping)
	return err
}

// Leave revokes the lease: the registration disappears at once instead of
// after the TTL, so the rest of the cluster reacts immediately.
func (m *Member) Leave() error {
	m.stopTenure()
	m.tenure.end()
	return m.session.Close()
}

// Abandon drops the session without revoking the lease, as a crashed
// process would: the registration lingers until the TTL runs out.
func (m *Member) Abandon() {
	m.stopTenure()
	m.tenure.end()
	m.session.Orphan()
}
